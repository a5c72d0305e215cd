// tests/gpu_opsb_parity.cpp: CPU vs CUDA parity for cross_entropy, topk_correct, layer_norm (both CUDA
// paths: the register kernels for D <= 1024 in 16-byte vectors, the generic ones otherwise),
// embedding, sum and mean, in f32, bf16 and f16 (forward and every input gradient).
//
// How the tolerances are set (see tests/support/parity.h): both backends get the same inputs,
// already rounded to the dtype, so only the op's arithmetic differs. The CPU computes in double and
// keeps an f32 result; the GPU computes in f32 and rounds its result to the dtype. So:
//   - f32: differences come from f32 vs double accumulation and summation order (~1e-6 relative);
//   - bf16/f16: the GPU's final rounding dominates: half an ulp is 2^-9 (bf16) or 2^-12 (f16)
//     relative, and where two nearby f32 values straddle a rounding boundary a whole ulp (2^-8,
//     2^-11). atol covers the f32 intermediate error of results that cancel to near zero.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {
// Results rounded once to the tested dtype (tests/support/parity.h); the f32 reason is this file's.
const PerDtype rounded_once =
    testing::rounded_once("f32: GPU f32 accumulation vs CPU double, different summation order");

Tensor labels(int64_t n, int64_t classes, Generator& g, DType t = DType::I64) {
  Tensor l = Tensor::empty({n}, t);
  randint_(l, classes, g);
  return l;
}

}  // namespace

TEST_CASE("cross_entropy parity, with and without label smoothing") {
  Generator g(1);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (float s : {0.0f, 0.1f}) {
      CAPTURE(s);
      auto f = [s](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cross_entropy(in[0], in[1], s)}; };
      // Small C (fewer classes than a warp has lanes) and C = 1000 (ImageNet: many per lane).
      CHECK(parity_check(f, {randn({6, 10}, g), labels(6, 10, g)}, t, rounded_once(t)) == "");
      CHECK(parity_check(f, {randn({37, 1000}, g), labels(37, 1000, g, DType::I32)}, t, rounded_once(t)) == "");
    }
  }
}

TEST_CASE("cross_entropy on CUDA: f32 loss for 16-bit logits, label errors") {
  Generator g(2);
  Tensor x = randn({4, 5}, g, DType::F32).to(DType::BF16).to(Device::cuda(0));
  Tensor l = labels(4, 5, g).to(Device::cuda(0));
  CHECK(ops::cross_entropy(x, l).dtype() == DType::F32);
  // CUDA labels are not checked on the host (no sync per step; the loader checks them): an
  // out-of-range label is clamped to C - 1 (or 0) and counted on the device, read lazily.
  CHECK(ops::take_bad_label_count() == 0);
  Tensor bad = Tensor::from_vector_i64({0, 1, 5, -3}, {4}).to(Device::cuda(0));
  Tensor clamped = Tensor::from_vector_i64({0, 1, 4, 0}, {4}).to(Device::cuda(0));
  Tensor lb = ops::cross_entropy(x, bad);
  CHECK(ops::take_bad_label_count() == 2);
  CHECK(ops::take_bad_label_count() == 0);  // taking resets
  CHECK(lb.item() == ops::cross_entropy(x, clamped).item());
  // The backward reads the same clamped labels but does not count them again (once per step), and
  // its gradient is the clamped labels' gradient.
  Tensor xr = x.detach().set_requires_grad(true), xc = x.detach().set_requires_grad(true);
  Tensor lr = ops::cross_entropy(xr, bad);
  CHECK(ops::take_bad_label_count() == 2);
  lr.backward();
  ops::cross_entropy(xc, clamped).backward();
  CHECK(ops::take_bad_label_count() == 0);
  REQUIRE(xr.grad().defined());
  CHECK(xr.grad().to_vector() == xc.grad().to_vector());
}

TEST_CASE("topk_correct parity") {
  Generator g(3);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    // Both sides see the same rounded logits; 16-bit rounding makes ties likely, and both break a
    // tie by the lower class index (fn::ranks_above), so the counts must agree exactly.
    Tensor x = ops::cast_raw(ops::cast_raw(randn({200, 12}, g), t), DType::F32);
    Tensor l = labels(200, 12, g);
    Tensor xg = ops::cast_raw(x, t).to(Device::cuda(0));
    Tensor lg = l.to(Device::cuda(0));
    for (int k : {1, 5}) {
      CAPTURE(k);
      CHECK(ops::topk_correct(x, l, k) == ops::topk_correct(xg, lg, k));
    }
  }
}

TEST_CASE("layer_norm parity (x, weight, bias)") {
  Generator g(4);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::layer_norm(in[0], in[1], in[2])}; };
    // dx = rstd (g - mean(g) - xhat mean(g xhat)) cancels three O(1) terms, each carrying f32
    // error ~1e-6, so values near zero need an absolute allowance on every dtype.
    Tolerance tol = rounded_once(t);
    tol.atol = 2e-5;
    tol.why = "16-bit: one rounding of the f32 result (rtol) plus f32 cancellation error in dx (atol)";
    if (t == DType::F32) tol = {1e-4, 2e-5, "f32: dx cancels three O(1) terms, each with f32 error ~1e-6"};
    CHECK(parity_check(f, {randn({6, 40}, g), randn({40}, g), randn({40}, g)}, t, tol) == "");
    // Many rows (several column-sum chunks for dweight/dbias) and D not a multiple of 32.
    // dweight/dbias add 1000 O(1) terms in f32 (GPU) vs double (CPU): ~1e-4 absolute.
    Tolerance big = tol;
    big.atol = 1e-4;
    big.why = "dweight/dbias: 1000-row sums in f32 (GPU) vs double (CPU)";
    CHECK(parity_check(f, {randn({1000, 200}, g), randn({200}, g), randn({200}, g)}, t, big) == "");
    // The register path (D a multiple of the 16-byte width, D <= 1024) and the generic one: BERT's
    // 768 and 1024, D = 36 (register path in f32 only), 37 and 1030 (generic everywhere: not a
    // multiple of any width, and past 1024), D = 8 (one vector in 16-bit). 300 rows: 10 chunks of
    // 30 rows for the partial sums; 8193 rows: 256 chunks of 33, the last ones empty.
    for (int64_t d : {768, 1024, 36, 37, 1030, 8}) {
      CAPTURE(d);
      CHECK(parity_check(f, {randn({300, d}, g), randn({d}, g), randn({d}, g)}, t, big) == "");
    }
    Tolerance many = tol;
    many.atol = 1e-3;
    many.why = "dweight/dbias: 8193-row sums (|sum| ~ 90) in f32 (GPU) vs double (CPU)";
    CHECK(parity_check(f, {randn({8193, 64}, g), randn({64}, g), randn({64}, g)}, t, many) == "");
  }
}

TEST_CASE("embedding parity, repeated indices") {
  Generator g(5);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::embedding(in[0], in[1])}; };
    // 20 indices into 6 rows: every row repeats. The forward is a copy (exact); the table gradient
    // sums up to ~20 rows with f32 atomics in arbitrary order, then rounds once to the dtype.
    Tolerance tol = rounded_once(t);
    CHECK(parity_check(f, {labels(20, 6, g).view({4, 5}), randn({6, 16}, g)}, t, tol) == "");
    CHECK(parity_check(f, {labels(300, 50, g, DType::I32), randn({50, 33}, g)}, t, tol) == "");
  }
  Tensor table = Tensor::zeros({4, 2}, DType::F32, Device::cuda(0));
  CHECK_THROWS_WITH_AS(ops::embedding(Tensor::from_vector_i64({0, 4}, {2}).to(Device::cuda(0)), table),
                       doctest::Contains("index 4"), Error);
}

TEST_CASE("sum and mean parity") {
  Generator g(6);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto fs = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::sum(in[0])}; };
    auto fm = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::mean(in[0])}; };
    Tolerance tol = rounded_once(t);
    CHECK(parity_check(fs, {randn({7, 33}, g)}, t, tol) == "");
    CHECK(parity_check(fm, {randn({7, 33}, g)}, t, tol) == "");
    // More elements than one pass of the partial-sum grid covers (1024 blocks x 256 threads).
    // Uniform [0, 0.2) values: no cancellation, so rtol alone bounds the f32 accumulation error,
    // and the sum (~30000) stays below f16's largest finite value, 65504.
    Tensor big = ops::scale(rand({300000}, g), 0.2f);
    Tolerance tb = t == DType::F32 ? Tolerance{1e-5, 0, "f32: 300k-term sum, f32 tree vs double"} : tol;
    CHECK(parity_check(fs, {big}, t, tb) == "");
    CHECK(parity_check(fm, {big}, t, tb) == "");
  }
}

TEST_CASE("topk_correct and cross_entropy with NaN, inf and tied rows: the GPU counts and propagates as the CPU") {
  // The rules are in tests/test_nonfinite_ops.cpp: NaN ranks highest, ties go to the lower index
  // (an all-NaN or constant row is correct only for labels < k), and a non-finite logit makes its
  // row's loss and gradient NaN.
  Generator g(7);
  const int64_t n = 64, c = 40;  // C > 32: each lane of the warp reads more than one logit
  std::vector<float> v = randn({n, c}, g).to_vector();
  for (int64_t r = 0; r < n; ++r) {
    float* row = v.data() + r * c;
    switch (r % 4) {
      case 0: for (int64_t j = 0; j < c; ++j) row[j] = NAN; break;  // all NaN
      case 1: row[(r * 7) % c] = NAN; break;                         // one NaN
      case 2: for (int64_t j = 0; j < c; ++j) row[j] = 0.5f; break;  // constant (ties everywhere)
      default: row[(r * 3) % c] = INFINITY; break;                   // one +inf
    }
  }
  const Tensor x = Tensor::from_vector(v, {n, c});
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tensor xc = ops::cast_raw(ops::cast_raw(x, t), DType::F32), xg = ops::cast_raw(x, t).to(Device::cuda(0));
    for (int k : {1, 5}) {
      CAPTURE(k);
      Tensor l = labels(n, c, g);
      const int64_t cpu = ops::topk_correct(xc, l, k);
      CHECK(cpu == ops::topk_correct(xg, l.to(Device::cuda(0)), k));
      CHECK(cpu < n / 2);  // the NaN and constant rows are not all correct, as they were before
    }
    Tolerance tol = rounded_once(t);
    tol.nonfinite_equal = true;
    auto ce = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cross_entropy(in[0], in[1], 0.1f)}; };
    CHECK(parity_check(ce, {x, labels(n, c, g)}, t, tol) == "");
    CHECK_FALSE(ops::all_finite(xg));
  }
}
