// tests/test_encoder_flops.cpp: the MFU arithmetic of train_encoder (apps/encoder/flops.h).
//
//  - FLOPs per token of bert_base and bert_large against the standard count written out here from
//    the architecture alone: 6 N (N counted layer by layer, which must give Hugging Face's
//    BertForMaskedLM parameter counts) + 12 L H S (PaLM's attention term), at seq 128 and 512.
//  - The peak: the dense peak of the dtype the matmuls run in, by GPU name - H100/H200 SXM bf16 and
//    fp16 989.4 TFLOP/s, TF32 494.7, f32 66.9; the other parts of the table; names that must not
//    match a neighbour ("A10" is not "A100", "L4" is not "L40S"); a V100 has no bf16 tensor cores;
//    an unknown GPU gets no peak and a source that says to pass --peak-tflops, which overrides all.
//  - Issue 17's own figures: 1.88 GFLOP/token at 121,171 tokens/s on one H100 in bf16 is about
//    23 % MFU; the 371 % it reported came from dividing tandem's count by the f32 SIMT peak.
#include <doctest/doctest.h>

#include <string>

#include "apps/encoder/flops.h"
#include "layers/models/bert.h"

using namespace tandem;
using namespace tandem::apps::encoder;

namespace {

// BertForMaskedLM's parameters, layer by layer (the tied decoder weight once).
int64_t bert_parameters(const BertConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, v = c.vocab_size;
  const int64_t embeddings = v * h + c.max_position_embeddings * h + c.type_vocab_size * h + 2 * h;  // + LayerNorm
  const int64_t attention = 4 * (h * h + h) + 2 * h;                  // Q, K, V, O with biases; LayerNorm
  const int64_t ffn = (h * i + i) + (i * h + h) + 2 * h;              // up, down; LayerNorm
  const int64_t head = (h * h + h) + 2 * h + v;                       // transform, LayerNorm, decoder bias
  return embeddings + c.num_hidden_layers * (attention + ffn) + head;
}

double tflops(const std::string& gpu, MatmulPrecision p) { return gpu_peak(gpu, p).flops / 1e12; }

}  // namespace

TEST_CASE("FLOPs per token: 6N + 12 L H S for bert_base and bert_large, N = Hugging Face's parameter counts") {
  struct Case {
    const char* model;
    int64_t hf_parameters;  // sum(p.numel() for p in BertForMaskedLM(cfg).parameters())
  };
  for (const Case& k : {Case{"bert_base", 109514298}, Case{"bert_large", 335174458}}) {
    CAPTURE(k.model);
    const BertConfig c = models::bert_config(k.model);
    const int64_t n = bert_parameters(c);
    CHECK(n == k.hf_parameters);
    for (int64_t seq : {128, 512}) {
      CAPTURE(seq);
      const double attention = 12.0 * static_cast<double>(c.num_hidden_layers * c.hidden_size * seq);
      CHECK(train_flops_per_token(c, n, seq) == 6.0 * static_cast<double>(n) + attention);
    }
  }
  // The figures the start-up line prints at seq 128.
  CHECK(train_flops_per_token(models::bert_config("bert_large"), 335174458, 128) / 1e9 ==
        doctest::Approx(2.0488).epsilon(1e-4));
  CHECK(train_flops_per_token(models::bert_config("bert_base"), 109514298, 128) / 1e9 ==
        doctest::Approx(0.67124).epsilon(1e-4));
}

TEST_CASE("the peak is the dense peak of the matmuls' dtype, by GPU name") {
  CHECK(matmul_precision("bf16", false) == MatmulPrecision::BF16);
  CHECK(matmul_precision("fp16", true) == MatmulPrecision::F16);
  CHECK(matmul_precision("off", true) == MatmulPrecision::TF32);  // BackendConfig::allow_tf32, the default
  CHECK(matmul_precision("off", false) == MatmulPrecision::F32);

  const std::string h100 = "NVIDIA H100 80GB HBM3";  // what cudaGetDeviceProperties calls the SXM5 part
  CHECK(tflops(h100, MatmulPrecision::BF16) == doctest::Approx(989.4));
  CHECK(tflops(h100, MatmulPrecision::F16) == doctest::Approx(989.4));
  CHECK(tflops(h100, MatmulPrecision::TF32) == doctest::Approx(494.7));
  CHECK(tflops(h100, MatmulPrecision::F32) == doctest::Approx(66.9));
  const PeakFlops p = gpu_peak(h100, MatmulPrecision::BF16);
  INFO(p.source);
  CHECK(p.source.find("H100 SXM5 dense bf16 tensor cores 989.4 TFLOP/s") != std::string::npos);
  CHECK(p.source.find("whitepaper") != std::string::npos);  // it names where the figure comes from

  CHECK(tflops("NVIDIA H200", MatmulPrecision::BF16) == doctest::Approx(989.4));
  CHECK(tflops("NVIDIA GH200 480GB", MatmulPrecision::BF16) == doctest::Approx(989.4));
  CHECK(tflops("NVIDIA H100 PCIe", MatmulPrecision::BF16) == doctest::Approx(756.0));
  CHECK(tflops("NVIDIA H100 NVL", MatmulPrecision::BF16) == doctest::Approx(835.5));
  CHECK(tflops("NVIDIA H200 NVL", MatmulPrecision::TF32) == doctest::Approx(417.5));
  CHECK(tflops("NVIDIA A100-SXM4-80GB", MatmulPrecision::BF16) == doctest::Approx(312.0));
  CHECK(tflops("NVIDIA A100 80GB PCIe", MatmulPrecision::TF32) == doctest::Approx(156.0));
  CHECK(tflops("NVIDIA A100-SXM4-40GB", MatmulPrecision::F32) == doctest::Approx(19.5));
  CHECK(tflops("NVIDIA A10", MatmulPrecision::BF16) == doctest::Approx(125.0));
  CHECK(tflops("NVIDIA A30", MatmulPrecision::BF16) == doctest::Approx(165.0));
  CHECK(tflops("NVIDIA L40S", MatmulPrecision::BF16) == doctest::Approx(362.05));
  CHECK(tflops("NVIDIA L40", MatmulPrecision::BF16) == doctest::Approx(181.05));
  CHECK(tflops("NVIDIA L4", MatmulPrecision::BF16) == doctest::Approx(121.0));
  CHECK(tflops("NVIDIA GeForce RTX 4090", MatmulPrecision::BF16) == doctest::Approx(165.2));
  CHECK(tflops("NVIDIA GeForce RTX 3090", MatmulPrecision::TF32) == doctest::Approx(35.6));
  CHECK(tflops("Tesla V100-SXM2-32GB", MatmulPrecision::F16) == doctest::Approx(125.0));
  CHECK(tflops("Tesla V100-SXM2-32GB", MatmulPrecision::TF32) == doctest::Approx(15.7));  // no TF32: f32 runs as f32

  // No peak: a part the table does not know (the A10G is not NVIDIA's A10), or no such tensor cores.
  for (const char* unknown : {"NVIDIA A10G", "NVIDIA B200", "Some Future GPU"}) {
    const PeakFlops u = gpu_peak(unknown, MatmulPrecision::BF16);
    INFO(unknown, ": ", u.source);
    CHECK(u.flops == 0);
    CHECK(u.source.find("--peak-tflops") != std::string::npos);
  }
  const PeakFlops v100 = gpu_peak("Tesla V100-PCIE-16GB", MatmulPrecision::BF16);
  CHECK(v100.flops == 0);
  CHECK(v100.source.find("has no bf16 tensor cores") != std::string::npos);

  // --peak-tflops wins over everything, on any device.
  const PeakFlops flag = peak_flops(Device::cpu(), 123.5, 1, MatmulPrecision::BF16);
  CHECK(flag.flops == 123.5e12);
  CHECK(flag.source == "--peak-tflops");
}

TEST_CASE("issue 17's figures: bf16 on one H100 is about 23 % MFU, and the f32 peak made it 371 %") {
  const double h100_bf16 = gpu_peak("NVIDIA H100 80GB HBM3", MatmulPrecision::BF16).flops;
  const double h100_f32 = gpu_peak("NVIDIA H100 80GB HBM3", MatmulPrecision::F32).flops;
  // The estimate: about 1.88 GFLOP per token x 121,171 tokens/s over 989 TFLOP/s.
  CHECK(mfu(121171, 1.88e9, h100_bf16) == doctest::Approx(0.2303).epsilon(1e-3));
  // What train_encoder printed (bert_large, batch 128, seq 128): its own count over the f32 peak.
  const double per_token = train_flops_per_token(models::bert_config("bert_large"), 335174458, 128);
  CHECK(100 * mfu(121171, per_token, h100_f32) == doctest::Approx(371.1).epsilon(1e-3));
  // The same run by the honest count.
  CHECK(100 * mfu(121171, per_token, h100_bf16) == doctest::Approx(25.09).epsilon(1e-3));
  CHECK(mfu(121171, per_token, 0) == 0);  // an unknown peak shows no MFU
}
