// apps/bench_ops.cpp: tandem's GEMM and conv against the libraries called directly.
//
// GPU part (skipped, with a message, when there is no GPU or with --cpu): the GEMMs of ResNet-50's
// classifier and of a BERT-large layer, and ResNet-50's convolutions, forward, in f32 (TF32 as
// BackendConfig::allow_tf32 says, on by default) and bf16. Each line shows tandem's median time (ops::linear /
// ops::conv2d under no-grad, i.e. with tandem's checks, allocation and plan cache), the median time
// of cuBLASLt / cuDNN called directly (apps/bench_ops_gpu.h) and tandem / direct: 1.00 means no
// overhead. Times are medians of --reps CUDA-event timings after --warmup runs.
// CPU part (always): GFLOP/s of ops::matmul in f32 next to cblas_sgemm on the same shapes (smaller
// than the GPU ones so the part finishes in seconds), ResNet-18's stem max-pool next to a copy of its
// input, and every conv shape of ResNet-18 and resnet_tiny at 64 px (VGG-16's last three with
// --cpu-conv-vgg), forward and both backwards, next to oneDNN called directly and to the im2col +
// OpenBLAS reference (apps/bench_ops_cpu_conv.h; --cpu-clock process on a shared machine). The CPU
// threads follow core/threads.h (all cores of one process, or OMP_NUM_THREADS) and are printed first.
// GPU attention (bf16, BERT shapes): cuDNN's fused SDPA next to the reference path, as the encoder runs them.
// GPU memory-bound ops (BN, elementwise, pooling, bias gradient, fused SGD): achieved GB/s next to
// a device-to-device copy's (apps/bench_ops_bandwidth.h).
// GPU fused GEMM tails (bias_gelu, bias_dropout_add vs the unfused op sequences, BERT-large
// shapes): GB/s next to a copy's, the same way (apps/bench_ops_fused.h).
// GPU row-wise and window kernels (layer_norm and scale_mask_softmax at BERT-large shapes, max_pool2d
// at ResNet-50's stem), forward and backward: GB/s next to a copy's (apps/bench_ops_rowwise.h).
// --cpu-gemm-models adds the CPU GEMM library rows (apps/bench_ops_cpu_gemm.h): every GEMM shape of the
// peer rows' training steps, OpenBLAS next to oneDNN's sgemm and matmul primitive.
// --json FILE writes every row. Performance is reported, never asserted.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/host_cache.h"  // defines: keep_freed_heap
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/threads.h"
#include "apps/bench_ops_cpu_conv.h"  // defines: bench::cpu_conv_part
#include "apps/bench_ops_cpu_gemm.h"  // defines: cpu_bench::cpu_gemm_part
#ifdef TANDEM_WITH_CUDA
#include "apps/bench_ops_bandwidth.h"  // defines: bench::bandwidth_part
#include "apps/bench_ops_fused.h"      // defines: bench::fused_bias_part
#include "apps/bench_ops_rowwise.h"    // defines: bench::rowwise_part
#include "apps/bench_ops_conv_fusion.h"  // defines: bench::conv_bias_relu_part, bench::conv_bn_relu_part
#include "apps/bench_ops_gpu.h"
#include "core/cuda/context.h"
#endif

using namespace tandem;
using json = nlohmann::json;

namespace {

struct Options {
  int reps = 20;          // timed repetitions per row (the median is reported)
  int warmup = 5;         // untimed runs first: plans get built, memory pools grow
  int conv_batch = 32;    // ResNet-50 conv batch (64 is the other common choice)
  int cpu_reps = 5;       // CPU rows are slower: fewer repetitions
  int cpu_conv_batch = 32;  // the CPU peer's ResNet-18 batch (apps/scripts/cpu_peer.py)
  bool cpu_only = false;  // skip the GPU part even when a GPU is present
  bool cpu_clock_process = false;  // CPU conv rows on the process's CPU time (a shared machine)
  std::string cpu_conv_only;       // CPU conv rows whose name contains this (empty: all)
  bool cpu_conv_vgg = false;       // also VGG-16's deep conv rows (seconds per repetition: off in CI)
  bool cpu_conv_resnet50 = false;  // also ResNet-50's conv rows at 224 px (seconds per repetition: off in CI)
  std::string cpu_gemm_models;     // CPU GEMM library rows of these models (empty: none; seconds: off in CI)
  std::string json_path;  // empty: no JSON file
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

template <typename F>
double cpu_median_ms(int warmup, int reps, F f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

void cpu_part(const Options& o, json& rows) {
  struct G {
    const char* name;
    int64_t m, n, k;
  };
  const G shapes[] = {{"square 512", 512, 512, 512},         {"square 1024", 1024, 1024, 1024},
                      {"encoder FFN1 (256 tok)", 256, 1024, 256}, {"encoder FFN2 (256 tok)", 256, 256, 1024},
                      {"classifier 64x512->1000", 64, 1000, 512}};
  std::printf("\nCPU GEMM, f32 (cblas: OpenBLAS)             m     n     k   tandem GFLOP/s   cblas GFLOP/s   ratio\n");
  for (const G& s : shapes) {
    Tensor a = Tensor::full({s.m, s.k}, 0.01), b = Tensor::full({s.k, s.n}, 0.01);
    std::vector<float> c(s.m * s.n);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    double t_tandem = cpu_median_ms(1, o.cpu_reps, [&] { ops::matmul(a, b); });
    double t_blas = cpu_median_ms(1, o.cpu_reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, pa, s.k, pb, s.n, 0.0f, c.data(), s.n);
    });
    double flop = 2.0 * s.m * s.n * s.k;
    double g_t = flop / t_tandem / 1e6, g_b = flop / t_blas / 1e6;
    std::printf("  %-38s %5lld %5lld %5lld   %14.1f   %13.1f   %5.2f\n", s.name, (long long)s.m, (long long)s.n,
                (long long)s.k, g_t, g_b, t_tandem / t_blas);
    rows.push_back({{"part", "cpu_gemm"}, {"name", s.name}, {"dtype", "f32"}, {"m", s.m}, {"n", s.n}, {"k", s.k},
                    {"tandem_ms", t_tandem}, {"direct_ms", t_blas}, {"tandem_gflops", g_t}, {"direct_gflops", g_b},
                    {"ratio", t_tandem / t_blas}});
  }
  // ResNet-18's stem max-pool at 64 px (3x3/2, pad 1, 32x32x64 -> 16x16x64), the peer's batch: the
  // one CPU pool of the ResNet rows. No library to compare with, so "direct" is the memory floor: a
  // copy of the input (the pool reads it once and writes a quarter of it).
  {
    Tensor x = Tensor::full({o.cpu_conv_batch, 32, 32, 64}, 0.01);
    std::vector<float> copy(static_cast<size_t>(x.numel()));
    ops::Pool2dParams pp;
    pp.kernel_h = pp.kernel_w = 3, pp.pad_h = pp.pad_w = 1;
    const double t = cpu_median_ms(1, o.cpu_reps, [&] { ops::max_pool2d(x, pp); });
    const double t_copy = cpu_median_ms(1, o.cpu_reps, [&] {
      std::copy(x.data<float>(), x.data<float>() + x.numel(), copy.data());
    });
    std::printf("\nCPU max_pool2d 3x3/2 pad 1, f32, [%d, 32, 32, 64]: %.3f ms forward, %.2fx a copy of its input\n",
                o.cpu_conv_batch, t, t / t_copy);
    rows.push_back({{"part", "cpu_pool"}, {"name", "max_pool2d 3x3/2 32x32x64"}, {"dtype", "f32"},
                    {"batch", o.cpu_conv_batch}, {"tandem_ms", t}, {"direct_ms", t_copy}, {"ratio", t / t_copy}});
  }
  if (!o.cpu_gemm_models.empty())
    cpu_bench::cpu_gemm_part(o.cpu_reps, o.cpu_clock_process, o.cpu_gemm_models, rows);
  cpu_bench::cpu_conv_part(o.cpu_reps, o.cpu_conv_batch, o.cpu_clock_process, o.cpu_conv_only, o.cpu_conv_vgg,
                            o.cpu_conv_resnet50, rows);
}

#ifdef TANDEM_WITH_CUDA
// Attention in bf16 at BERT's shapes, as the encoder runs it (ops::attention_qkv on the fused QKV
// projection's output, a right-padded mask with no padding): cuDNN's fused SDPA (Fused, in place
// through strides) vs the reference path (head split, cuBLAS GEMMs + scale_mask_softmax, merge),
// forward alone and forward + backward, training dropout 0.1. cudnn/ref < 1: cuDNN is faster.
// (PyTorch's SDPA on the same shapes belongs to the PyTorch peer, apps/scripts.)
void attention_part(const bench::Timing& t, json& rows) {
  struct Att {
    const char* name;
    int64_t b, h, s, d;
  };
  const Att shapes[] = {{"BERT-base, seq 128, batch 32", 32, 12, 128, 64},
                        {"BERT-large, seq 128, batch 32", 32, 16, 128, 64},
                        {"BERT-large, seq 512, batch 8", 8, 16, 512, 64}};
  std::printf("\nGPU attention_qkv, bf16, dropout 0.1             pass       cudnn ms  reference ms  cudnn/ref\n");
  for (const Att& a : shapes) {
    Device dev = Device::cuda(cuda::current_device());
    Tensor qkv = Tensor::full({a.b, a.s, 3 * a.h * a.d}, 0.01, DType::BF16, dev);
    Tensor dout = Tensor::full({a.b, a.s, a.h * a.d}, 0.01, DType::BF16, dev);
    Tensor mask = Tensor::ones({a.b, a.s}, DType::I32, dev);
    for (bool backward : {false, true}) {
      qkv.set_requires_grad(backward);
      auto time = [&](ops::AttentionBackend backend) {
        ops::AttentionOptions o;
        o.backend = backend;
        o.dropout_p = 0.1f;
        o.training = true;
        o.mask_right_padded = true;
        return bench::median_ms(cuda::compute_stream(), t, [&] {
          Tensor out = ops::attention_qkv(qkv, a.h, mask, o);
          if (backward) autograd::backward({out}, {dout});
        });
      };
      const double tf = time(ops::AttentionBackend::Fused), tr = time(ops::AttentionBackend::Reference);
      const char* pass = backward ? "fwd+bwd" : "fwd";
      std::printf("  %-46s %-8s %9.3f  %12.3f  %9.2f\n", a.name, pass, tf, tr, tf / tr);
      rows.push_back({{"part", "gpu_attention"}, {"name", a.name}, {"dtype", "bf16"}, {"pass", pass},
                      {"cudnn_ms", tf}, {"reference_ms", tr}, {"ratio", tf / tr}});
    }
  }
}

void gpu_part(const Options& o, json& rows) {
  bench::Timing t{o.warmup, o.reps};
  attention_part(t, rows);  // before the no-grad guard below: it times backward too
  bench::bandwidth_part(t, rows);  // likewise (BN forward + backward)
  bench::fused_bias_part(t, rows);  // likewise (fused tails forward + backward)
  bench::rowwise_part(t, rows);     // layer_norm, softmax and max-pool, forward and backward
  bench::conv_bias_relu_part(t, rows, o.conv_batch);  // VGG/AlexNet conv + bias + ReLU, fused vs not
  bench::conv_bn_relu_part(t, rows, o.conv_batch);    // ResNet-50 conv -> BN -> ReLU, fused vs not
  cudaStream_t tandem_stream = cuda::compute_stream();
  cudaStream_t direct_stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&direct_stream, cudaStreamNonBlocking));
  struct Lin {
    const char* name;
    int64_t m, n, k;  // y [m, n] = x [m, k] w^T + b
  };
  const int64_t tok = 512 * 8;  // BERT-large: sequence 512 x batch 8
  const Lin gemms[] = {{"ResNet-50 FC (batch 256)", 256, 1000, 2048}, {"BERT-large QKV", tok, 3072, 1024},
                       {"BERT-large attn-out", tok, 1024, 1024},      {"BERT-large FFN1", tok, 4096, 1024},
                       {"BERT-large FFN2", tok, 1024, 4096}};
  const int64_t nb = o.conv_batch;
  struct Conv {
    const char* name;
    bench::ConvShape s;
  };
  const Conv convs[] = {{"stem 7x7/2 3->64 @224", {nb, 224, 224, 3, 64, 7, 2, 3}},
                        {"1x1 64->64 @56", {nb, 56, 56, 64, 64, 1, 1, 0}},
                        {"3x3 64->64 @56", {nb, 56, 56, 64, 64, 3, 1, 1}},
                        {"1x1 64->256 @56", {nb, 56, 56, 64, 256, 1, 1, 0}},
                        {"1x1 256->64 @56", {nb, 56, 56, 256, 64, 1, 1, 0}},
                        {"3x3/2 128->128 @56", {nb, 56, 56, 128, 128, 3, 2, 1}},
                        {"3x3 256->256 @14", {nb, 14, 14, 256, 256, 3, 1, 1}},
                        {"1x1/2 1024->2048 @14", {nb, 14, 14, 1024, 2048, 1, 2, 0}},
                        {"3x3 512->512 @7", {nb, 7, 7, 512, 512, 3, 1, 1}}};
  autograd::NoGradGuard no_grad;
  for (DType dt : {DType::F32, DType::BF16}) {
    const bool tf32 = dt == DType::F32 && backend().allow_tf32;
    const char* label = dt == DType::BF16 ? "bf16" : (tf32 ? "f32 (tf32)" : "f32");
    const cudaDataType_t cdt = dt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudnnDataType_t ddt = dt == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const size_t es = dtype_size(dt);
    std::printf("\nGPU linear forward, %s (y = x w^T + b)          m      n      k   tandem ms  cuBLASLt ms  ratio  TFLOP/s\n",
                label);
    for (const Lin& g : gemms) {
      Device d = Device::cuda(cuda::current_device());
      Tensor x = Tensor::full({g.m, g.k}, 0.01, dt, d), w = Tensor::full({g.n, g.k}, 0.01, dt, d),
             b = Tensor::full({g.n}, 0.01, dt, d);
      double tt = bench::median_ms(tandem_stream, t, [&] { ops::linear(x, w, b); });
      double td = bench::cublaslt_linear_ms(direct_stream, t, cdt, es, tf32, g.m, g.n, g.k);
      double tflops = 2.0 * g.m * g.n * g.k / td / 1e9;
      std::printf("  %-40s %6lld %6lld %6lld  %9.3f  %11.3f  %5.2f  %7.1f\n", g.name, (long long)g.m, (long long)g.n,
                  (long long)g.k, tt, td, tt / td, tflops);
      rows.push_back({{"part", "gpu_linear"}, {"name", g.name}, {"dtype", label}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                      {"tandem_ms", tt}, {"direct_ms", td}, {"ratio", tt / td}});
    }
    // The last two columns: the same conv with a bias, fused into cuDNN's graph and as a separate
    // add (BackendConfig::conv_bias_fusion): what VGG/AlexNet's biased convs cost each way.
    std::printf("\nGPU conv2d forward, %s, NHWC, batch %lld                   tandem ms  cuDNN ms  ratio  "
                "+bias fused ms  +bias add ms\n", label, (long long)nb);
    for (const Conv& c : convs) {
      Device d = Device::cuda(cuda::current_device());
      Tensor x = Tensor::full({c.s.n, c.s.h, c.s.w, c.s.c}, 0.01, dt, d);
      Tensor w = Tensor::full({c.s.o, c.s.k, c.s.k, c.s.c}, 0.01, dt, d);
      ops::Conv2dParams p;
      p.stride_h = p.stride_w = static_cast<int>(c.s.stride);
      p.pad_h = p.pad_w = static_cast<int>(c.s.pad);
      Tensor b = Tensor::full({c.s.o}, 0.01, dt, d);
      double tt = -1, td = -1, tf = -1, ta = -1;
      try {  // a shape cuDNN has no engine for (e.g. 16-bit with 3 channels) skips the row, not the run
        tt = bench::median_ms(tandem_stream, t, [&] { ops::conv2d(x, w, Tensor(), p); });
        td = bench::cudnn_conv_ms(direct_stream, t, ddt, es, c.s);
        for (bool fuse : {true, false}) {
          BackendConfig bc = backend();
          bc.conv_bias_fusion = fuse;
          BackendScope scope(bc);  // the previous settings come back at the end of each pass
          (fuse ? tf : ta) = bench::median_ms(tandem_stream, t, [&] { ops::conv2d(x, w, b, p); });
        }
      } catch (const Error& e) {
        std::printf("  %-56s n/a: %s\n", c.name, e.what());
        rows.push_back({{"part", "gpu_conv"}, {"name", c.name}, {"dtype", label}, {"error", e.what()}});
        continue;
      }
      std::printf("  %-56s %9.3f  %8.3f  %5.2f  %13.3f  %12.3f\n", c.name, tt, td, td > 0 ? tt / td : 0.0, tf, ta);
      rows.push_back({{"part", "gpu_conv"}, {"name", c.name}, {"dtype", label}, {"batch", nb}, {"tandem_ms", tt},
                      {"direct_ms", td}, {"ratio", td > 0 ? tt / td : 0.0}, {"bias_fused_ms", tf},
                      {"bias_add_ms", ta}});
    }
  }
  CUDA_CHECK(cudaStreamDestroy(direct_stream));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_ops: tandem's GEMM and conv next to cuBLASLt/cuDNN (GPU) and OpenBLAS (CPU)"};
  app.add_option("--reps", o.reps, "timed repetitions per GPU row; the median is printed")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed runs before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--conv-batch", o.conv_batch, "batch size of the ResNet-50 conv rows")->check(CLI::PositiveNumber);
  app.add_option("--cpu-reps", o.cpu_reps, "timed repetitions per CPU row")->check(CLI::PositiveNumber);
  app.add_option("--cpu-conv-batch", o.cpu_conv_batch, "batch size of the CPU conv rows")->check(CLI::PositiveNumber);
  std::string clock = "wall";
  app.add_option("--cpu-clock", clock,
                 "clock of the CPU conv rows: wall, or process (CPU time of all threads: fair on a shared machine)")
      ->check(CLI::IsMember({"wall", "process"}));
  app.add_option("--cpu-conv-only", o.cpu_conv_only, "run only the CPU conv rows whose 'model conv' contains TEXT");
  app.add_flag("--cpu-conv-resnet50", o.cpu_conv_resnet50,
               "also ResNet-50's 23 distinct conv shapes at 224 px (the CPU peer's row; use --cpu-conv-batch 8)");
  app.add_flag("--cpu-conv-vgg", o.cpu_conv_vgg,
               "also VGG-16's last three conv shapes at 64 px (slow: seconds per repetition)");
  app.add_option("--cpu-gemm-models", o.cpu_gemm_models,
                 "also every GEMM of these models' CPU training step (bert_small, resnet18, vgg16, or all), "
                 "OpenBLAS next to oneDNN's sgemm and matmul (apps/bench_ops_cpu_gemm.h; seconds per repetition)");
  app.add_flag("--cpu", o.cpu_only, "run only the CPU part, even if a GPU is present");
  app.add_option("--json", o.json_path, "also write all rows to this JSON file");
  CLI11_PARSE(app, argc, argv);
  o.cpu_clock_process = clock == "process";

  json rows = json::array();
  std::string gpu_status;
  try {
    if (o.cpu_only) {
      gpu_status = "skipped (--cpu)";
    } else if (!cuda_available()) {
      gpu_status = built_with_cuda() ? "skipped (no CUDA device visible)" : "skipped (CPU-only build)";
    } else {
#ifdef TANDEM_WITH_CUDA
      gpu_part(o, rows);
      gpu_status = "ran";
#endif
    }
    if (gpu_status != "ran") std::printf("GPU part %s: only the CPU GEMM rows follow.\n", gpu_status.c_str());
    host_cache::keep_freed_heap();  // as the trainers run (core/host_cache.h)
    const CpuThreads threads = configure_cpu_threads(1);
    std::printf("CPU part: %d thread(s) (%s)\n", threads.threads, threads.reason.c_str());
    cpu_part(o, rows);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  if (!o.json_path.empty()) {
    json out = {{"bench", "bench_ops"}, {"gpu", gpu_status}, {"reps", o.reps}, {"warmup", o.warmup},
                {"allow_tf32", backend().allow_tf32}, {"rows", rows}};
    std::ofstream f(o.json_path);
    if (!f) {
      std::fprintf(stderr, "bench_ops: cannot write %s: check the directory exists and is writable\n",
                   o.json_path.c_str());
      return 1;
    }
    f << out.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  return 0;
}
