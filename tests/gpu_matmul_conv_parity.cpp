// tests/gpu_matmul_conv_parity.cpp: cuBLASLt matmul/linear and cuDNN conv2d against the CPU
// reference (OpenBLAS), forward and backward, in f32 (strict and TF32), bf16 and f16.
// Exits 77 (Skipped) without a GPU.
//
// Inputs are N(0, 1); reductions are at most ~150 terms. parity_check rounds inputs to the tested
// dtype first, so in bf16/f16 the products are exact in f32 and the error is the f32 accumulation
// (negligible) plus one rounding of each output to the storage type. Tolerances and their reasons:
//   f32 strict: 1e-4 rel / 1e-3 abs - f32 accumulation in a different order; Winograd/FFT engines
//               add transform error ~1e-6 of the sum of |terms| (~100 here).
//   TF32:       2e-2 rel / 5e-2 abs - inputs keep a 10-bit mantissa (rel. error 2^-11 per
//               product); ~150 random-signed terms of size ~1 give errors of a few 1e-3, 4 sigma
//               over thousands of outputs reaches ~3e-2.
//   bf16:       2e-2 rel / 2e-2 abs - one bf16 rounding of the output (2^-9 = 2e-3 rel), twice
//               when the bias is added in a separate pass, plus split-K partials that cuDNN's wgrad
//               may keep in reduced precision (numerical note REDUCED_PRECISION_REDUCTION).
//   f16:        4e-3 rel / 4e-3 abs - the same reasoning with f16's 2^-12 = 2.4e-4 rounding.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/conv_params.h"
#include "tests/support/parity.h"

using namespace tandem;
using testing::conv_params;
using testing::parity_check;
using testing::Tolerance;

namespace {

struct Precision {
  const char* name;
  DType dtype;
  bool tf32;
  Tolerance tol;
};

const Precision kPrecisions[] = {
    {"f32 strict", DType::F32, false, {1e-4, 1e-3, "f32 accumulation order; Winograd/FFT transform error"}},
    {"f32 tf32", DType::F32, true, {2e-2, 5e-2, "TF32 keeps 10 mantissa bits of each input"}},
    {"bf16", DType::BF16, false, {2e-2, 2e-2, "bf16 output rounding (2^-9), twice with a separate bias add"}},
    {"f16", DType::F16, false, {4e-3, 4e-3, "f16 output rounding (2^-12), twice with a separate bias add"}},
};

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g);
}

// Runs `body` once per precision with TF32 set as that precision wants, restoring it afterwards.
template <typename F>
void for_each_precision(F body) {
  for (const Precision& p : kPrecisions) {
    CAPTURE(p.name);
    BackendConfig c = backend();
    c.allow_tf32 = p.tf32;
    BackendScope scope(c);
    body(p);
  }
}

}  // namespace

TEST_CASE("linear parity with and without bias (cuBLASLt BIAS / BGRADB epilogues)") {
  for_each_precision([](const Precision& p) {
    auto with_bias = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1], in[2])}; };
    auto no_bias = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1])}; };
    CHECK(parity_check(with_bias, {rnd({4, 9, 64}, 1), rnd({48, 64}, 2), rnd({48}, 3)}, p.dtype, p.tol) == "");
    CHECK(parity_check(no_bias, {rnd({37, 64}, 4), rnd({40, 64}, 5)}, p.dtype, p.tol) == "");
    // Odd sizes: operands that are not 16-byte aligned in every row must still find an algorithm.
    CHECK(parity_check(with_bias, {rnd({5, 13}, 6), rnd({7, 13}, 7), rnd({7}, 8)}, p.dtype, p.tol) == "");
  });
}

// Issue 27 item 9: at BERT's aligned shapes the bias add and the bias gradient must ride on the
// GEMMs' epilogues (BIAS, BGRADB), not fall back to separate passes silently: counted by
// ops::gemm_epilogue_stats, which counts every CUDA GEMM that asked for an epilogue.
TEST_CASE("linear's BIAS and BGRADB epilogues fuse at BERT shapes (no separate bias pass)") {
  for (DType dt : {DType::BF16, DType::F16}) {  // the encoder's training dtypes
    CAPTURE(dtype_name(dt));
    // BERT-base's FFN up-projection on 2 x 128 tokens: x [256, 768], w [3072, 768], b [3072].
    Tensor x = ops::cast_raw(rnd({256, 768}, 41), dt).to(Device::cuda(0)).detach();
    Tensor w = ops::cast_raw(rnd({3072, 768}, 42), dt).to(Device::cuda(0)).detach();
    Tensor b = ops::cast_raw(rnd({3072}, 43), dt).to(Device::cuda(0)).detach();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    const ops::GemmEpilogueStats before = ops::gemm_epilogue_stats();
    Tensor y = ops::linear(x, w, b);
    ops::sum(ops::cast_raw(y, DType::F32)).backward();
    const ops::GemmEpilogueStats after = ops::gemm_epilogue_stats();
    std::printf("  linear %s: BIAS fused %lld separate %lld, BGRADB fused %lld separate %lld\n", dtype_name(dt),
                static_cast<long long>(after.bias_fused - before.bias_fused),
                static_cast<long long>(after.bias_separate - before.bias_separate),
                static_cast<long long>(after.bgradb_fused - before.bgradb_fused),
                static_cast<long long>(after.bgradb_separate - before.bgradb_separate));
    CHECK(after.bias_fused - before.bias_fused == 1);
    CHECK(after.bias_separate == before.bias_separate);
    CHECK(after.bgradb_fused - before.bgradb_fused == 1);
    CHECK(after.bgradb_separate == before.bgradb_separate);
    CHECK(b.grad().defined());
  }
}

// issue 17.3: the GEMM with its erf-GELU or dropout+residual tail as one op, the bias gradient from
// the weight-gradient GEMM's BGRADB epilogue (or its fallback) - against the CPU reference. Dropout
// p = 0 here: the same generator draws differ in nothing then, and the mask rule has its own tests.
// Shapes: aligned (BERT-like, the epilogue fuses) and odd (13-wide rows: cuBLASLt may refuse the
// epilogue for unaligned operands, and the column-sum fallback must agree).
TEST_CASE("linear_bias_gelu and linear_bias_dropout_add parity (bias gradient from the dw GEMM)") {
  for_each_precision([](const Precision& p) {
    auto gelu = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::linear_bias_gelu(in[0], in[1], in[2])};
    };
    auto dropout_add = [](const std::vector<Tensor>& in) {
      Generator gen(1);
      return std::vector<Tensor>{ops::linear_bias_dropout_add(in[0], in[1], in[2], in[3], 0.0f, true, gen)};
    };
    CHECK(parity_check(gelu, {rnd({4, 16, 64}, 11), rnd({128, 64}, 12), rnd({128}, 13)}, p.dtype, p.tol) == "");
    CHECK(parity_check(gelu, {rnd({5, 13}, 14), rnd({7, 13}, 15), rnd({7}, 16)}, p.dtype, p.tol) == "");
    CHECK(parity_check(dropout_add, {rnd({4, 16, 64}, 17), rnd({64, 64}, 18), rnd({64}, 19), rnd({4, 16, 64}, 20)},
                       p.dtype, p.tol) == "");
    CHECK(parity_check(dropout_add, {rnd({5, 13}, 21), rnd({7, 13}, 22), rnd({7}, 23), rnd({5, 7}, 24)}, p.dtype,
                       p.tol) == "");
  });
}

TEST_CASE("batched matmul parity, every transpose combination") {
  for_each_precision([](const Precision& p) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        CAPTURE(ta);
        CAPTURE(tb);
        auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::matmul(in[0], in[1], ta, tb)}; };
        const int64_t B = 3, m = 24, n = 40, k = 64;
        Tensor a = rnd(ta ? Shape{B, k, m} : Shape{B, m, k}, 10 + ta);
        Tensor b = rnd(tb ? Shape{B, n, k} : Shape{B, k, n}, 20 + tb);
        CHECK(parity_check(f, {a, b}, p.dtype, p.tol) == "");
        Tensor a2 = rnd(ta ? Shape{k, m} : Shape{m, k}, 12 + ta), b2 = rnd(tb ? Shape{n, k} : Shape{k, n}, 22 + tb);
        CHECK(parity_check(f, {a2, b2}, p.dtype, p.tol) == "");
      }
  });
}

TEST_CASE("conv2d parity (cuDNN graph API) across stride, padding, dilation, groups, bias") {
  struct Case {
    const char* name;
    Shape x, w;
    ops::Conv2dParams p;
  };
  const Case cases[] = {
      {"3x3 same", {2, 8, 8, 16}, {16, 3, 3, 16}, conv_params(1, 1, 1, 1)},
      {"3x3 stride 2", {2, 9, 9, 16}, {24, 3, 3, 16}, conv_params(2, 1, 1, 1)},
      {"1x1", {2, 6, 6, 32}, {16, 1, 1, 32}, conv_params(1, 0, 1, 1)},
      {"1x1 stride 2 (downsample)", {2, 8, 8, 16}, {32, 1, 1, 16}, conv_params(2, 0, 1, 1)},
      {"7x7 stride 2 stem, 3 channels", {2, 16, 16, 3}, {8, 7, 7, 3}, conv_params(2, 3, 1, 1)},
      {"dilated", {1, 10, 10, 8}, {8, 3, 3, 8}, conv_params(1, 2, 2, 1)},
      {"grouped", {2, 6, 6, 16}, {16, 3, 3, 4}, conv_params(1, 1, 1, 4)},
      {"depthwise", {2, 7, 7, 16}, {16, 3, 3, 1}, conv_params(1, 1, 1, 16)},
  };
  // Both bias paths: cuDNN's fused conv + bias graph (the default, where an engine takes the shape)
  // and the plain conv followed by the broadcast add (BackendConfig::conv_bias_fusion, core/ops/conv/conv.h).
  for (bool fuse : {true, false}) {
    CAPTURE(fuse);
    BackendConfig c = backend();
    c.conv_bias_fusion = fuse;
    BackendScope scope(c);
    for_each_precision([&](const Precision& p) {
      for (const Case& c : cases) {
        CAPTURE(c.name);
        auto f = [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::conv2d(in[0], in[1], in[2], c.p)};
        };
        CHECK(parity_check(f, {rnd(c.x, 30), rnd(c.w, 31), rnd({c.w[0]}, 32)}, p.dtype, p.tol) == "");
      }
    });
  }
}

TEST_CASE("cached plans are reused correctly when the same shape runs again") {
  // The second call hits the plan caches (cuBLASLt algorithm, cuDNN execution plan): results must
  // not depend on whether the plan was fresh.
  Tensor x = rnd({2, 8, 8, 16}, 40).to(Device::cuda(0)), w = rnd({16, 3, 3, 16}, 41).to(Device::cuda(0));
  std::vector<float> first = ops::conv2d(x, w, Tensor(), conv_params(1, 1, 1, 1)).to_vector();
  std::vector<float> second = ops::conv2d(x, w, Tensor(), conv_params(1, 1, 1, 1)).to_vector();
  CHECK(first == second);
  Tensor a = rnd({33, 64}, 42).to(Device::cuda(0)), b = rnd({64, 40}, 43).to(Device::cuda(0));
  CHECK(ops::matmul(a, b).to_vector() == ops::matmul(a, b).to_vector());
}
