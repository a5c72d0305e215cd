#!/usr/bin/env python3
"""tests/test_session_scripts.py: the GPU session's instruments, on the CPU, from hand-made inputs.

  - kernel_profile.py (apps/scripts/kernel_profile.sh's aggregator) on two fixture CSVs in the two
    layouts Nsight Compute writes (tests/data/gpu_scripts/): `--page raw` (one row per launch, a
    units row, "usecond", thousands separators) and `--page details` (one row per metric, mixed
    units, a second metric to ignore). Per step and per category to the microsecond, the side-by-side
    markdown row, the short names; the category rules on real kernel names of tandem, PyTorch,
    cuDNN, cuBLAS, NCCL and Triton, including the ones a careless rule gets wrong (a lambda is not
    LAMB, gpu_kernel_impl_nocast is not a cast, broadcast is not a cast, LpNorm is clipping).
  - sanitize_filter.py on compute-sanitizer reports: NCCL initialisation's API errors alone pass;
    a memory error, tandem's own API error, NCCL's outside its init and unprinted records fail.
  - session_summary.py on a raw folder: tandem vs PyTorch eager and torch.compile, per precision
    and per encoder config, with every MFU from one FLOPs count and one peak (issue 17's bf16 H100
    figures: tandem 121,171 tok/s = 25.1 %), the kernel profile included.
  - session_summary.py's fused-path table (the runs' gpu_paths counters) and the cuDNN graph check's lines.
  - gpu_session.sh and kernel_profile.sh parse and print their help (bash -n, --help); --first-look
    refuses phase names.
Standard library only; run by ctest (session_scripts) or directly.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "apps", "scripts")
DATA = os.path.join(HERE, "data", "gpu_scripts")
sys.path.insert(0, SCRIPTS)

import kernel_profile  # noqa: E402
import sanitize_filter  # noqa: E402


def slurp(path):
    with open(path) as f:
        return f.read()


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


class KernelProfile(unittest.TestCase):
    def test_raw_page_per_step_and_category(self):
        launches = kernel_profile.read_ncu_csv(os.path.join(DATA, "ncu_tandem_raw.csv"))
        self.assertEqual(len(launches), 6)
        self.assertAlmostEqual(launches[2][1], 1204250.0)  # "1,204.25" usecond
        a = kernel_profile.aggregate(launches, steps=2)
        self.assertAlmostEqual(a["total_ms_per_step"], 0.8)
        self.assertEqual(a["launches_per_step"], 3)
        c = a["categories"]
        self.assertAlmostEqual(c["transpose/copy"]["ms_per_step"], 0.1355)
        self.assertAlmostEqual(c["transpose/copy"]["share"], 271 / 1600)
        self.assertAlmostEqual(c["GEMM"]["ms_per_step"], 0.602125)
        self.assertAlmostEqual(c["cast"]["ms_per_step"], 0.002625)
        self.assertAlmostEqual(c["reduction"]["ms_per_step"], 0.019375)
        self.assertAlmostEqual(c["optimizer"]["ms_per_step"], 0.040375)
        self.assertEqual(c["attention"]["launches_per_step"], 0)
        top = a["kernels"][0]
        self.assertEqual(top["name"], "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
                                      "execute_segment_k_off_kernel__5x_cublas")
        names = [k["name"] for k in a["kernels"]]
        self.assertIn("transpose12_kernel<__nv_bfloat16>", names)
        self.assertIn("cast_kernel<float, __nv_bfloat16>", names)
        self.assertEqual([k["launches_per_step"] for k in a["kernels"] if k["name"].startswith("transpose")], [1.0])

    def test_details_page_units_and_other_metrics(self):
        launches = kernel_profile.read_ncu_csv(os.path.join(DATA, "ncu_torch_details.csv"))
        self.assertEqual(len(launches), 3)  # the throughput row is not a duration
        a = kernel_profile.aggregate(launches, steps=2)
        self.assertAlmostEqual(a["total_ms_per_step"], 0.9)
        self.assertAlmostEqual(a["categories"]["attention"]["ms_per_step"], 0.125)
        self.assertAlmostEqual(a["categories"]["GEMM"]["ms_per_step"], 0.75)
        self.assertAlmostEqual(a["categories"]["optimizer"]["ms_per_step"], 0.025)

    def test_side_by_side_markdown_and_json(self):
        with tempfile.TemporaryDirectory() as d:
            md, js = os.path.join(d, "p.md"), os.path.join(d, "p.json")
            r = run(os.path.join(SCRIPTS, "kernel_profile.py"), "--side", "tandem=" + os.path.join(DATA, "ncu_tandem_raw.csv"),
                    "--side", "pytorch=" + os.path.join(DATA, "ncu_torch_details.csv"), "--steps", "2", "--md", md,
                    "--json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = slurp(md)
            self.assertIn("| category | tandem ms/step | tandem % | tandem launches/step | pytorch ms/step |", text)
            self.assertIn("| transpose/copy | 0.14 | 16.9 | 1 | - | - | - |", text)
            self.assertIn("| attention | - | - | - | 0.12 | 13.9 | 0.5 |", text)
            self.assertIn("| GEMM | 0.60 | 75.3 | 0.5 | 0.75 | 83.3 | 0.5 |", text)
            self.assertIn("| **all** | **0.80** | 100 | 3 | **0.90** | 100 | 1.5 |", text)
            self.assertIn(f"| `transpose12_kernel<__nv_bfloat16>` | transpose/copy | {0.271 / 2:.3f} | 16.9 | 1 |", text)
            j = json.loads(slurp(js))
            self.assertEqual(set(j), {"tandem", "pytorch"})
            self.assertAlmostEqual(j["pytorch"]["total_ms_per_step"], 0.9)
        bad = run(os.path.join(SCRIPTS, "kernel_profile.py"), "--side", "x=" + os.path.join(DATA, "sanitize_mixed.txt"),
                  "--steps", "1")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("no ncu CSV header", bad.stderr)

    def test_category_rules(self):
        cases = {
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)": "communication",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
            "void tandem::kernels::(anonymous namespace)::flash_drow_kernel<float>(int)": "attention",
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64": "conv",
            "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "conv",
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct)": "BN",
            "void tandem::kernels::(anonymous namespace)::partial_stats_kernel<float>(int)": "BN",
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<float>(int)": "BN",
            "void tandem::kernels::ln_fwd_kernel<__nv_bfloat16>(int)": "norm",
            "triton_red_fused_native_layer_norm_native_layer_norm_backward_3": "norm",
            "void tandem::kernels::sms_bwd_kernel<float>(int)": "softmax",
            "void tandem::kernels::ce_rows_kernel<float>(int)": "softmax",
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(int)": "softmax",
            "void tandem::kernels::(anonymous namespace)::each_element_kernel<tandem::kernels::(anonymous namespace)"
            "::GatherBackward<float>>(long, tandem::kernels::(anonymous namespace)::GatherBackward<float>)": "pooling",
            "void at::native::(anonymous namespace)::max_pool_backward_nhwc<c10::BFloat16>(int)": "pooling",
            "magma_sgemmEx_kernel": "GEMM",
            "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NNT": "GEMM",
            "void tandem::kernels::cast_kernel<float, __nv_bfloat16>(const float *, __nv_bfloat16 *, long)": "cast",
            "void tandem::kernels::(anonymous namespace)::transpose12_kernel<float>(int)": "transpose/copy",
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_"
            "kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const>(int, T3)":
                "transpose/copy",
            "void tandem::kernels::broadcast_kernel<float>(const float *, float *, long)": "elementwise",
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>(int)":
                "reduction",
            "void tandem::kernels::(anonymous namespace)::map_column_sum_kernel<float>(int)": "reduction",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, 2, float, float>>(int)":
                "optimizer",
            "void tandem::optim::kernels::lamb_phase1_kernel(int)": "optimizer",
            "void tandem::optim::kernels::unscale_check_kernel<__nv_bfloat16>(int)": "optimizer",
            "triton_poi_fused_addmm_gelu_2": "elementwise",
            "triton_poi_fused_convolution_backward_relu_4": "elementwise",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>"
            "(int, T2, T3)": "elementwise",
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(int)":
                "other",
            "void tandem::kernels::(anonymous namespace)::scatter_add_kernel<float>(int)": "other",
        }
        for name, want in cases.items():
            with self.subTest(name=name):
                self.assertEqual(kernel_profile.category(name), want)


class SanitizeFilter(unittest.TestCase):
    def test_nccl_initialisation_errors_alone_pass(self):
        v = sanitize_filter.judge(slurp(os.path.join(DATA, "sanitize_nccl_init.txt")))
        self.assertEqual(v["total"], 2)
        self.assertEqual(v["ignored"], ["cudaErrorNoKernelImageForDevice"] * 2)
        self.assertEqual(v["counted"], [])
        with tempfile.TemporaryDirectory() as d:
            r = run(os.path.join(SCRIPTS, "sanitize_filter.py"), os.path.join(DATA, "sanitize_nccl_init.txt"),
                    "--summary", os.path.join(d, "v"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            line = slurp(os.path.join(d, "v"))
        self.assertIn("ERROR SUMMARY: 2 errors; 2 ignored: API errors inside NCCL's initialisation "
                      "(cudaErrorNoKernelImageForDevice); 0 counted", line)

    def test_memory_errors_tandems_api_errors_and_unprinted_records_fail(self):
        v = sanitize_filter.judge(slurp(os.path.join(DATA, "sanitize_mixed.txt")))
        self.assertEqual(v["total"], 6)
        self.assertEqual(len(v["ignored"]), 1)  # only the API error inside ncclCommInitRank
        self.assertEqual(v["counted"], [
            "Invalid __global__ read of size 4 bytes",  # a memory error, whatever its backtrace
            "Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to cudaMemcpyAsync.",
            "Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to cudaStreamQuery.",
        ])
        self.assertEqual(v["unprinted"], 2)
        r = run(os.path.join(SCRIPTS, "sanitize_filter.py"), os.path.join(DATA, "sanitize_mixed.txt"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("5 counted: Invalid __global__ read of size 4 bytes (+2 not printed)", r.stdout)

    def test_a_report_without_summary_is_not_a_pass(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("========= COMPUTE-SANITIZER\nkilled\n")
        try:
            self.assertEqual(run(os.path.join(SCRIPTS, "sanitize_filter.py"), f.name).returncode, 2)
        finally:
            os.unlink(f.name)


class SessionSummary(unittest.TestCase):
    def test_eager_and_compiled_side_by_side_with_one_flops_count(self):
        with tempfile.TemporaryDirectory() as raw:
            def put(name, obj):
                with open(os.path.join(raw, name), "w") as f:
                    json.dump(obj, f)
            # Issue 17's bf16 H100 figures, bert_large batch 128, seq 128.
            fpt = 6.0 * 335174458 + 12.0 * 24 * 1024 * 128
            put("enc_tandem_bert_large_b128_s128.json", {
                "seq_len": 128, "amp": "bf16", "tokens_per_s": 121171, "sequences_per_s": 946.6, "parameters": 335174458,
                "flops_per_token": fpt, "peak_flops_per_rank": 989.4e12, "final": {"train_loss": 7.1},
                "peak_source": "NVIDIA H100 80GB HBM3: H100 SXM5 dense bf16 tensor cores 989.4 TFLOP/s, whitepaper"})
            peer = {"seq": 128, "parameters": 335174458, "flops_per_token": fpt, "model_source": "torch.nn:sdpa"}
            put("enc_torch_bert_large_b128_s128.json", dict(peer, tokens_per_s=153519))
            put("enc_torch_bert_large_b128_s128_compile.json", dict(peer, tokens_per_s=197639))
            # A peer-only config whose FLOPs count disagrees with nothing: no MFU without tandem's peak.
            put("enc_torch_bert_base_b32_s512.json", dict(peer, tokens_per_s=50000, parameters=109514298,
                                                          flops_per_token=6.0 * 109514298 + 12.0 * 12 * 768 * 512))
            put("tandem_resnet50_b256_bf16.json", {"images_per_s": 4846, "batch_per_rank": 256, "parameters": 25557032,
                                                   "amp": "bf16", "final": {"train_loss": 6.9}})
            put("torch_resnet50_b256_bf16.json", {"images_per_s": 3979, "parameters": 25557032, "amp": "bf16"})
            put("torch_resnet50_b256_bf16_compile.json", {"images_per_s": 5605, "parameters": 25557032})
            put("convbn_resnet50_b256_bf16_on.json", {"images_per_s": 5100, "batch_per_rank": 256,
                                                      "conv_bn_fusion": {"setting": "on", "graph_calls": 106, "fallbacks": 0}})
            put("tandem_vgg16_b128_tf32.json", {"images_per_s": 1500, "batch_per_rank": 128, "parameters": 138357544,
                                                "amp": "off", "final": {"train_loss": float("nan")}})
            os.makedirs(os.path.join(raw, "kernel_profile_bert_large_b64_s128"))
            with open(os.path.join(raw, "kernel_profile_bert_large_b64_s128", "profile.md"), "w") as f:
                f.write("# Kernel profile: encoder bert_large batch 64\n\n| category | tandem ms/step |\n")
            r = run(os.path.join(SCRIPTS, "session_summary.py"), raw, "--json", os.path.join(raw, "s.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            md = r.stdout
            s = json.loads(slurp(os.path.join(raw, "s.json")))
        self.assertIn("| bert_large_b128_s128 | 121171 | 153519 | 197639 | 0.79 | 0.61 | 25.1% | 31.8% | 40.9% |", md)
        self.assertIn("| bert_base_b32_s512 | - | 50000 | - | - | - | - | - | - |", md)
        self.assertIn("- MFU's peak: 989.4 TFLOP/s per rank (NVIDIA H100 80GB HBM3: H100 SXM5 dense bf16", md)
        self.assertIn("| resnet50_b256_bf16 | 4846.0 | 3979.0 | 5605.0 | 1.22 | 0.86 |", md)
        self.assertIn("warning (vgg16_b128_tf32): tandem's final loss is not finite", md)
        # --conv-bn-fusion on beside the same run off (tandem_<tag>.json, whose metrics have no counts)
        self.assertIn("| resnet50_b256_bf16 | off | 4846.0 | - | - |\n| resnet50_b256_bf16 | on | 5100.0 | 106 | 0 |", md)
        self.assertIn("## Kernel profile: encoder bert_large batch 64", md)
        enc = {e["config"]: e for e in s["encoder"]}
        self.assertAlmostEqual(enc["bert_large_b128_s128"]["tandem_mfu"], 121171 * fpt / 989.4e12)
        self.assertNotIn("warning", enc["bert_large_b128_s128"])


    def test_fused_paths_table_and_cudnn_graph_check(self):
        with tempfile.TemporaryDirectory() as raw:
            paths = {"attention_sdpa": {"fused": 48, "reference": 0}, "gemm_bias": {"fused": 192, "separate": 0},
                     "gemm_bgradb": {"fused": 190, "separate": 2}, "conv_bias": {"fused": 0, "separate": 0},
                     "conv_bias_relu_graph": {"fallback": 0, "fused": 0}, "conv_bn_graph": {"fallback": 3, "fused": 100},
                     "batchnorm_cudnn": {"bn": 0, "bn_relu": 0, "bn_add_relu": 0, "fallbacks": 0}}
            with open(os.path.join(raw, "enc_tandem_bert_large_b128_s128.json"), "w") as f:
                json.dump({"tokens_per_s": 1000, "gpu_paths": paths}, f)
            with open(os.path.join(raw, "cudnn_graphs.log"), "w") as f:
                f.write("validate conv: 327 graphs, 0 refused as known_refusal lists, 0 unexpected\nnoise\n")
            r = run(os.path.join(SCRIPTS, "session_summary.py"), raw, "--json", os.path.join(raw, "s.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
        md = r.stdout
        self.assertIn("## Fused paths and fallbacks", md)
        # nlohmann writes keys sorted: "fallback" before "fused" - the table must still say fused first
        self.assertIn("| enc_tandem_bert_large_b128_s128 | 48 / 0 | 192 / 0 | 190 / 2 | 0 / 0 | 0 / 0 | 100 / 3 "
                      "| 0 / 0 / 0 / 0 |", md)
        self.assertIn("- cuDNN graphs (tests/cpu_cudnn_graphs.cpp): validate conv: 327 graphs", md)
        self.assertNotIn("noise", md)


class ShellScripts(unittest.TestCase):
    def test_first_look_refuses_phase_names(self):
        r = subprocess.run(["bash", os.path.join(SCRIPTS, "gpu_session.sh"), "--first-look", "test"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--first-look runs its own steps", r.stderr)

    def test_syntax_and_help(self):
        for script, words in (("gpu_session.sh", ["--train-amp", "--peer-modes", "--profile-config", "--first-look",
                                                  "never ran", "h100_device_properties.json"]),
                              ("kernel_profile.sh", ["--app encoder|imagenet", "--peer eager|compile|none"])):
            with self.subTest(script=script):
                path = os.path.join(SCRIPTS, script)
                self.assertEqual(subprocess.run(["bash", "-n", path]).returncode, 0)
                h = subprocess.run(["bash", path, "--help"], capture_output=True, text=True)
                self.assertEqual(h.returncode, 0, h.stderr)
                for w in words:
                    self.assertIn(w, h.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
