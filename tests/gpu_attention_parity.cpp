// tests/gpu_attention_parity.cpp: CPU vs CUDA parity for scale_mask_softmax (with mask, with
// dropout), the reference attention path, split_qkv_heads/merge_heads and cross_entropy with
// ignore_index, in f32, bf16 and f16 (forward and every input gradient).
//
// Tolerances (tests/support/parity.h): inputs are rounded to the dtype first, so only arithmetic
// differs.
//   - scale_mask_softmax: the GPU computes in f32 and rounds p once to the dtype -> rounded_once.
//     With dropout the masks are bit-identical (counter RNG) and the scaling is applied to the
//     rounded p on both sides, so the same tolerance holds.
//   - attention: three roundings to the dtype in a row on the GPU (scores, p, output) and the GEMMs
//     accumulate in f32 in another order (and TF32 for f32 unless disabled: it is disabled here),
//     so bf16 gets 3 ulp = 3 * 2^-8 and f16 3 * 2^-11 relative; atol 1e-3 / 2e-4 covers outputs
//     that are sums of +- terms cancelling to near zero (an output is a convex mix of v rows).
//   - the head split/merge only move values: exact (rtol 0).
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using testing::parity_check;
using testing::Tolerance;

namespace {
const auto& kDtypes = testing::kParityDtypes;
Tolerance rounded_once(DType t) {
  return testing::rounded_once(t, "f32: GPU f32 statistics vs CPU double, different summation order");
}
Tolerance three_roundings(DType t) {
  switch (t) {
    case DType::BF16: return {3e-2, 1e-3, "bf16: scores, p and output each rounded (3 ulp of 2^-8), f32 GEMM order"};
    case DType::F16: return {6e-3, 2e-4, "f16: scores, p and output each rounded (3 ulp of 2^-11), f32 GEMM order"};
    default: return {1e-4, 1e-6, "f32 (TF32 off): GEMM summation order and f32 vs double softmax statistics"};
  }
}
Tensor mask(const std::vector<int64_t>& v, int64_t b, int64_t s) { return Tensor::from_vector_i64(v, {b, s}); }
}  // namespace

TEST_CASE("scale_mask_softmax parity: no mask, padding mask, a fully padded row, dropout") {
  Generator g(1);
  Tensor m = mask({1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1}, 4, 5);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto plain = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], Tensor(), 0.35f)};
    };
    CHECK(parity_check(plain, {randn({2, 3, 7, 37}, g)}, t, rounded_once(t)) == "");  // Sk > 32 lanes
    auto masked = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f)};
    };
    CHECK(parity_check(masked, {randn({4, 2, 3, 5}, g), m}, t, rounded_once(t)) == "");
    auto dropped = [&](const std::vector<Tensor>& in) {
      Generator d(5);  // a fresh generator per call: both backends draw the same mask
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f, 0.2f, true, d)};
    };
    CHECK(parity_check(dropped, {randn({4, 2, 3, 5}, g), m}, t, rounded_once(t)) == "");
  }
}

TEST_CASE("attention (reference path) parity with a padding mask and dropout") {
  Generator g(2);
  const bool tf32 = ops::allow_tf32();
  ops::set_allow_tf32(false);  // f32 compares GEMM order, not TF32's 10-bit mantissa
  Tensor m = mask({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0},
                  2, 20);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (float p : {0.0f, 0.1f}) {
      CAPTURE(p);
      auto f = [&](const std::vector<Tensor>& in) {
        Generator d(9);
        ops::AttentionOptions o;
        o.dropout_p = p;
        o.training = true;
        return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], in[3], o, d)};
      };
      CHECK(parity_check(f, {randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), m}, t,
                         three_roundings(t)) == "");
    }
  }
  ops::set_allow_tf32(tf32);
}

TEST_CASE("split_qkv_heads and merge_heads parity (pure data movement: exact)") {
  Generator g(3);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      auto p = ops::split_qkv_heads(in[0], 4);
      return std::vector<Tensor>{ops::merge_heads(p[0]), ops::merge_heads(p[1]), ops::merge_heads(p[2])};
    };
    CHECK(parity_check(f, {randn({2, 5, 3 * 32}, g)}, t, Tolerance{0.0, 0.0, "copies only"}) == "");
  }
}

TEST_CASE("cross_entropy with ignore_index parity") {
  Generator g(4);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::cross_entropy(in[0], in[1], 0.0f, -100)};
    };
    Tensor labels = Tensor::from_vector_i64({3, -100, -100, 7, 0, -100, 12, -100}, {8});
    CHECK(parity_check(f, {randn({8, 30}, g), labels}, t, rounded_once(t)) == "");
  }
}
