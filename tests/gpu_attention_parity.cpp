// tests/gpu_attention_parity.cpp: CPU vs CUDA parity for scale_mask_softmax (with mask, with
// dropout), both attention paths (reference; flash vs reference on CPU and GPU and vs its CPU twin;
// which one Auto takes at the size rule), split_qkv_heads/merge_heads and cross_entropy with
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
//   - flash path (AttentionBackend::Fused) on the GPU vs the reference path on the CPU: the kernel
//     computes in f32 from the rounded inputs and rounds each result once, so rounded_once's rtol,
//     but a wider atol: backward's d_row = dot(dO, O) reads the output rounded to the dtype, and
//     that error reaches dq/dk absolutely (through p * (dp - d_row)) where dp - d_row cancels.
//   - flash vs reference, both on the GPU in bf16/f16: the sum of both error budgets.
//   - flash kernel vs its CPU twin in f32: the same algorithm, other summation order.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <functional>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {
const PerDtype rounded_once =
    testing::rounded_once("f32: GPU f32 statistics vs CPU double, different summation order");
// Softmax backward in 16-bit: the GPU saves p rounded to 16 bits, and dx = p * (dy - sum p dy) is a
// difference, so its error is a few ulp of the largest term (max_rel), not of dx itself. Measured
// on an H100 (2026-11-22): element-wise bounds failed on 1-11 of 120-1554 entries whose values had
// cancelled to ~1e-4 while the tensor's largest was ~1e-2.
const PerDtype softmax_backward{
    .f32 = rounded_once(DType::F32),
    .bf16 = {1e-2, 1e-6, "bf16: one rounding (2^-8) of p and of the output; dx cancels", 4 * 0x1p-8},
    .f16 = {2e-3, 1e-6, "f16: one rounding (2^-11) of p and of the output; dx cancels", 4 * 0x1p-11}};
// The reference attention rounds the scores, p and the output (three roundings); the output is a
// p-weighted mean of v (|v| ~ 1), so an ulp of p moves it by ~2^-8 |v| whatever its own size.
const PerDtype three_roundings{
    .f32 = {1e-4, 1e-6, "f32 (TF32 off): GEMM summation order and f32 vs double softmax statistics"},
    .bf16 = {3e-2, 1e-3, "bf16: scores, p and output each rounded (3 ulp of 2^-8), f32 GEMM order", 8 * 0x1p-8},
    .f16 = {6e-3, 2e-4, "f16: scores, p and output each rounded (3 ulp of 2^-11), f32 GEMM order", 8 * 0x1p-11}};
Tensor mask(const std::vector<int64_t>& v, int64_t b, int64_t s) { return Tensor::from_vector_i64(v, {b, s}); }

// attention(q, k, v, mask) with training dropout p on the backend chosen per device; a fresh
// generator per call, so the CPU and the GPU draw the same dropout mask.
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> attention_fn(float p, ops::AttentionBackend on_cpu,
                                                                          ops::AttentionBackend on_gpu,
                                                                          bool masked = true) {
  return [=](const std::vector<Tensor>& in) {
    Generator d(9);
    ops::AttentionOptions o;
    o.dropout_p = p;
    o.training = true;
    o.backend = in[0].is_cuda() ? on_gpu : on_cpu;
    return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], masked ? in[3] : Tensor(), o, d)};
  };
}

const PerDtype flash_vs_cpu{
    .f32 = {1e-4, 1e-5, "f32: tile/butterfly summation order, expf vs double softmax statistics"},
    .bf16 = {1.5e-2, 5e-4, "bf16: f32 math, one rounding (2^-8); d_row reads the rounded O", 4 * 0x1p-8},
    .f16 = {3e-3, 1e-4, "f16: f32 math, one rounding (2^-11); d_row reads the rounded O", 4 * 0x1p-11}};
const PerDtype flash_vs_reference_gpu{
    .f32 = {1e-4, 1e-5, "f32 (TF32 off): summation order only"},
    .bf16 = {4e-2, 2e-3, "bf16: reference's three roundings plus flash's one", 12 * 0x1p-8},
    .f16 = {1e-2, 5e-4, "f16: reference's three roundings plus flash's one", 12 * 0x1p-11}};

// [B, Sk] padding: entry 0 keeps a prefix, 1 has holes, 2 is fully padded (uniform rows).
Tensor flash_mask(int64_t B, int64_t Sk) {
  std::vector<int64_t> m(static_cast<size_t>(B * Sk), 1);
  for (int64_t j = Sk * 2 / 3; j < Sk; ++j) m[j] = 0;
  for (int64_t j = 0; B > 1 && j < Sk; j += 3) m[Sk + j] = 0;
  for (int64_t j = 0; B > 2 && j < Sk; ++j) m[2 * Sk + j] = 0;
  return Tensor::from_vector_i64(m, {B, Sk});
}

// Shapes crossing every tile boundary (Sq = 37: 16+16+5 and 32+5; Sk = 45: 32+13 and 16+16+13),
// every register width NC = ceil(D / 32) with a partial last chunk (D = 40), and D = 128, whose
// backward needs the > 48 KiB shared-memory opt-in.
struct FlashShape {
  int64_t B, H, Sq, Sk, D;
};
constexpr FlashShape kFlashShapes[] = {{3, 2, 37, 45, 64}, {3, 1, 37, 45, 40}, {3, 2, 16, 32, 8}, {2, 2, 20, 70, 128},
                                       {3, 1, 33, 17, 96}};

// Random q, k, v (CPU f32) and the padding mask for one shape.
std::vector<Tensor> flash_inputs(const FlashShape& s, Generator& g) {
  return {randn({s.B, s.H, s.Sq, s.D}, g), randn({s.B, s.H, s.Sk, s.D}, g), randn({s.B, s.H, s.Sk, s.D}, g),
          flash_mask(s.B, s.Sk)};
}

struct GpuRun {
  std::vector<float> out, dq, dk, dv;
};
GpuRun run_gpu(ops::AttentionBackend backend, const std::vector<Tensor>& qkvw, const Tensor& m, float p) {
  std::vector<Tensor> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(qkvw[i].detach());
    in.back().set_requires_grad(true);
  }
  ops::AttentionOptions o;
  o.backend = backend;
  o.dropout_p = p;
  o.training = true;
  Generator d(9);
  Tensor out = ops::attention(in[0], in[1], in[2], m, o, d);
  autograd::backward({out}, {qkvw[3]});
  return {out.to_vector(), in[0].grad().to_vector(), in[1].grad().to_vector(), in[2].grad().to_vector()};
}
}  // namespace

TEST_CASE("scale_mask_softmax parity: no mask, padding mask, a fully padded row, dropout") {
  Generator g(1);
  Tensor m = mask({1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1}, 4, 5);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto plain = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], Tensor(), 0.35f)};
    };
    CHECK(parity_check(plain, {randn({2, 3, 7, 37}, g)}, t, softmax_backward(t)) == "");  // Sk > 32 lanes
    auto masked = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f)};
    };
    CHECK(parity_check(masked, {randn({4, 2, 3, 5}, g), m}, t, softmax_backward(t)) == "");
    auto dropped = [&](const std::vector<Tensor>& in) {
      Generator d(5);  // a fresh generator per call: both backends draw the same mask
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f, 0.2f, true, d)};
    };
    CHECK(parity_check(dropped, {randn({4, 2, 3, 5}, g), m}, t, softmax_backward(t)) == "");
  }
}

// The CUDA register path reads N keys per access, N the widest power of two up to 16 bytes that
// divides Sk and leaves no lane idle; Sk > 1024 takes the generic path. Sk = 1 (one key: p = 1,
// dx = 0), 6 (N = 1), 37 (N = 1, two slots), 128 (BERT: N = 4), 256 (N = 8 in 16-bit, 4 in f32),
// 1024 (every slot of every lane), 1025 (generic). Each with the padding mask (entry 1 padded
// from the middle, entry 2 fully padded) and dropout, whose mask must match the CPU's bit for bit.
TEST_CASE("scale_mask_softmax parity at every register width and past it, masked, with dropout") {
  Generator g(3);
  for (DType t : kDtypes) {
    for (int64_t sk : {1, 6, 37, 128, 256, 1024, 1025}) {
      CAPTURE(dtype_name(t));
      CAPTURE(sk);
      std::vector<int64_t> keep(static_cast<size_t>(3 * sk), 1);
      for (int64_t j = sk / 2; j < sk; ++j) keep[static_cast<size_t>(sk + j)] = 0;
      for (int64_t j = 0; j < sk; ++j) keep[static_cast<size_t>(2 * sk + j)] = 0;
      Tensor m = mask(keep, 3, sk);
      auto dropped = [](const std::vector<Tensor>& in) {
        Generator d(6);
        return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.3f, 0.1f, true, d)};
      };
      CHECK(parity_check(dropped, {randn({3, 2, 3, sk}, g), m}, t, softmax_backward(t)) == "");
      auto plain = [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.3f)};
      };
      CHECK(parity_check(plain, {randn({3, 2, 3, sk}, g), m}, t, softmax_backward(t)) == "");
    }
  }
}

TEST_CASE("attention (reference path) parity with a padding mask and dropout") {
  Generator g(2);
  const Tf32Scope tf32(false);  // f32 compares GEMM order, not TF32's 10-bit mantissa
  Tensor m = mask({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0},
                  2, 20);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (float p : {0.0f, 0.1f}) {
      CAPTURE(p);
      auto f = attention_fn(p, ops::AttentionBackend::Auto, ops::AttentionBackend::Auto);
      CHECK(parity_check(f, {randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), m}, t,
                         three_roundings(t)) == "");
    }
  }
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

TEST_CASE("flash attention (GPU) vs the reference path (CPU): forward and q/k/v gradients, padding, dropout") {
  Generator g(20);
  const Tf32Scope tf32(false);
  for (const FlashShape& s : kFlashShapes) {
    CAPTURE(s.Sq);
    CAPTURE(s.Sk);
    CAPTURE(s.D);
    for (DType t : kDtypes) {
      CAPTURE(dtype_name(t));
      for (bool masked : {false, true})
        for (float p : {0.0f, 0.1f}) {
          CAPTURE(masked);
          CAPTURE(p);
          auto f = attention_fn(p, ops::AttentionBackend::Reference, ops::AttentionBackend::Fused, masked);
          CHECK(parity_check(f, flash_inputs(s, g), t, flash_vs_cpu(t)) == "");
        }
    }
  }
}

TEST_CASE("flash kernel vs its CPU twin in f32 (the algorithm the CPU tests validate)") {
  Generator g(21);
  for (const FlashShape& s : kFlashShapes) {
    CAPTURE(s.D);
    auto f = attention_fn(0.1f, ops::AttentionBackend::Fused, ops::AttentionBackend::Fused);
    CHECK(parity_check(f, flash_inputs(s, g), DType::F32, flash_vs_cpu(DType::F32)) == "");
  }
}

TEST_CASE("flash vs reference on the GPU in bf16/f16; Auto is the reference at these sizes; flash is deterministic") {
  Generator g(22);
  const Tf32Scope tf32(false);
  for (const FlashShape& s : kFlashShapes) {
    CAPTURE(s.D);
    for (DType t : {DType::BF16, DType::F16}) {
      CAPTURE(dtype_name(t));
      auto gpu = [&](const Shape& shape) { return ops::cast_raw(randn(shape, g), t).to(Device::cuda(0)); };
      std::vector<Tensor> in{gpu({s.B, s.H, s.Sq, s.D}), gpu({s.B, s.H, s.Sk, s.D}), gpu({s.B, s.H, s.Sk, s.D}),
                             gpu({s.B, s.H, s.Sq, s.D})};
      Tensor m = flash_mask(s.B, s.Sk).to(Device::cuda(0));
      for (float p : {0.0f, 0.1f}) {
        CAPTURE(p);
        const GpuRun ref = run_gpu(ops::AttentionBackend::Reference, in, m, p);
        const GpuRun fused = run_gpu(ops::AttentionBackend::Fused, in, m, p);
        const Tolerance tol = flash_vs_reference_gpu(t);
        CHECK(testing::compare_values("out", ref.out, fused.out, tol) == "");
        CHECK(testing::compare_values("dq", ref.dq, fused.dq, tol) == "");
        CHECK(testing::compare_values("dk", ref.dk, fused.dk, tol) == "");
        CHECK(testing::compare_values("dv", ref.dv, fused.dv, tol) == "");
        // Flash has no atomics: the same bits twice.
        const GpuRun again = run_gpu(ops::AttentionBackend::Fused, in, m, p);
        CHECK(again.out == fused.out);
        CHECK(again.dq == fused.dq);
        CHECK(again.dk == fused.dk);
        CHECK(again.dv == fused.dv);
        // Auto at these small sizes is the reference path (attention.h's size rule): its bits.
        const GpuRun autob = run_gpu(ops::AttentionBackend::Auto, in, m, p);
        CHECK(autob.out == ref.out);
        CHECK(autob.dv == ref.dv);
      }
    }
  }
}

TEST_CASE("Auto takes flash exactly where attention.h's size rule says (512 MiB of 16-bit probabilities)") {
  // Batch 8, 16 heads, Sq = Sk: 1448 is just under kAutoFusedMinBytes, 1449 crosses it
  // (test_flash_attention checks the rule; this checks that attention() applies it to q's shape
  // and dtype). Forward only, no mask, head dim 8 to keep it cheap. Flash and the reference path
  // round differently, so equal bits tell which path Auto ran.
  Generator g(23);
  for (int64_t s : {int64_t{1448}, int64_t{1449}}) {
    CAPTURE(s);
    auto gpu = [&] { return ops::cast_raw(randn({8, 16, s, 8}, g), DType::BF16).to(Device::cuda(0)); };
    const Tensor q = gpu(), k = gpu(), v = gpu();
    auto run = [&](ops::AttentionBackend b) {
      ops::AttentionOptions o;
      o.backend = b;
      Generator d(9);
      return ops::attention(q, k, v, Tensor(), o, d).to_vector();
    };
    const std::vector<float> automatic = run(ops::AttentionBackend::Auto);
    const std::vector<float> ref = run(ops::AttentionBackend::Reference), fused = run(ops::AttentionBackend::Fused);
    REQUIRE(ref != fused);  // else equal bits could not tell the paths apart
    CHECK(automatic == (s == 1449 ? fused : ref));
  }
}
