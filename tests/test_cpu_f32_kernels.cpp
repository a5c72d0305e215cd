// tests/test_cpu_f32_kernels.cpp: the CPU's f32 softmax and GELU, which compute their exponentials
// and Phi in f32 (core/ops/common/cpu/f32_math.h) rather than through libm in double, against
// straightforward double references: f32_math's functions over their whole range, then the
// kernels (attention/cpu.cpp's scale-mask-softmax, fused_bias/cpu.cpp's bias_gelu) against the same
// kernels in f64, which keep libm. Each bound is the measured worst case with about 1.5x margin
// (the measured figure beside it); a wrong coefficient or range reduction misses by orders of
// magnitude. The exact zeros of the softmax contract (masked keys) are checked exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "core/ops/attention/kernels.h"
#include "core/ops/common/cpu/f32_math.h"
#include "core/ops/fused_bias/kernels.h"
#include "core/tensor.h"

using namespace tandem;
namespace fm = tandem::kernels::f32_math;

namespace {
double phi_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double phi_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }
double ulp_of(double v) { return std::nextafter(static_cast<float>(v), INFINITY) - static_cast<float>(v); }

// Deterministic values in [lo, hi] (an LCG: the test makes its own data).
std::vector<float> values(uint32_t seed, size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(seed >> 8) / static_cast<float>(1u << 24);
  }
  return v;
}
Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor f64(const std::vector<float>& v, const Shape& s) {
  return Tensor::from_vector_f64(std::vector<double>(v.begin(), v.end()), s, DType::F64);
}
}  // namespace

TEST_CASE("f32_math::exp_nonpositive: within 2 ulp of e^x on [-87.33, 0], 0 below, NaN stays NaN") {
  double worst = 0;
  for (int i = 0; i <= 2'000'000; ++i) {
    const float x = -87.33f * static_cast<float>(i) / 2'000'000.0f;
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fm::exp_nonpositive(x) - want) / ulp_of(want));
  }
  MESSAGE("exp_nonpositive: worst error ", worst, " ulp");  // measured 1.19
  CHECK(worst <= 2.0);
  CHECK(fm::exp_nonpositive(0.0f) == 1.0f);
  CHECK(fm::exp_nonpositive(-87.34f) == 0.0f);
  CHECK(fm::exp_nonpositive(-std::numeric_limits<float>::max()) == 0.0f);  // a masked key minus the max
  CHECK(fm::exp_nonpositive(-INFINITY) == 0.0f);
  CHECK(std::isnan(fm::exp_nonpositive(NAN)));
}

TEST_CASE("f32_math::normal_cdf and gelu against erfc and exp in double") {
  double pos_abs = 0, neg_rel5 = 0, neg_rel13 = 0, pdf_rel5 = 0, gelu_abs = 0, grad_abs = 0;
  for (int i = -1'400'000; i <= 1'400'000; ++i) {
    const float x = static_cast<float>(i) * 1e-5f;  // [-14, 14]
    const double xd = x, cdf = phi_cdf(xd), pdf = phi_pdf(xd);
    float got_pdf;
    const double got = fm::normal_cdf(x, &got_pdf);
    if (x >= 0) pos_abs = std::max(pos_abs, std::fabs(got - cdf));
    else if (x >= -5) neg_rel5 = std::max(neg_rel5, std::fabs(got / cdf - 1));
    else if (x >= -13) neg_rel13 = std::max(neg_rel13, std::fabs(got / cdf - 1));
    if (std::fabs(x) <= 5) pdf_rel5 = std::max(pdf_rel5, std::fabs(got_pdf / pdf - 1));
    gelu_abs = std::max(gelu_abs, std::fabs(fm::gelu(x) - xd * cdf));
    grad_abs = std::max(grad_abs, std::fabs(fm::gelu_grad(0.75f, x) - 0.75 * (cdf + xd * pdf)));
  }
  MESSAGE("Phi: x >= 0 ", pos_abs, " abs; -5 <= x < 0 ", neg_rel5, " rel; -13 <= x < -5 ", neg_rel13,
          " rel; phi |x| <= 5 ", pdf_rel5, " rel; gelu ", gelu_abs, " abs; gelu' ", grad_abs, " abs");
  CHECK(pos_abs <= 3.5e-7);    // measured (numpy emulation of the same f32 steps) 2.4e-7
  CHECK(neg_rel5 <= 1.3e-6);   // 8.6e-7
  CHECK(neg_rel13 <= 6e-6);    // 4.0e-6: x^2 / 2 rounded in f32, then scaled by x^2 / 2 in the exp
  CHECK(pdf_rel5 <= 9e-7);     // 6.0e-7
  CHECK(gelu_abs <= 6e-7);     // 3.8e-7
  CHECK(grad_abs <= 1e-6);
  float pdf;
  CHECK(fm::normal_cdf(-20.0f, &pdf) == 0.0f);  // beyond the flush: exactly 0 and 1
  CHECK(fm::normal_cdf(20.0f, &pdf) == 1.0f);
  CHECK(fm::gelu(INFINITY) == INFINITY);
  CHECK(std::isnan(fm::gelu(NAN)));
  CHECK(std::isnan(fm::gelu_grad(1.0f, NAN)));
}

TEST_CASE("CPU scale-mask-softmax in f32 equals the f64 kernel within a few ulp; masked keys exactly 0") {
  // cols 37 (odd: the four-lane sums' tail) and 128 (bert_small's sequence); rows of batch 1 keep
  // no key at all (uniform), batch 0 keeps some.
  for (int64_t cols : {int64_t{37}, int64_t{128}}) {
    for (bool dropout : {false, true}) {
      CAPTURE(cols);
      CAPTURE(dropout);
      const int64_t B = 3, H = 2, S = 5, rows = B * H * S, n = rows * cols;
      const Shape shape{B, H, S, cols};
      const std::vector<float> xv = values(static_cast<uint32_t>(cols), static_cast<size_t>(n), -12.0f, 12.0f);
      Tensor mask = Tensor::empty({B, cols}, DType::I32);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < cols; ++j) mask.data<int32_t>()[b * cols + j] = b == 1 ? 0 : (b == 0 ? j % 3 != 1 : 1);
      kernels::SoftmaxArgs a;
      a.rows = rows, a.cols = cols, a.rows_per_batch = H * S, a.scale = 0.37f;
      a.dropout = dropout, a.dropout_p = 0.2f, a.seed = 99, a.offset = 1000;

      Tensor x32 = f32(xv, shape), p32 = Tensor::empty(shape), y32 = dropout ? Tensor::empty(shape) : p32;
      Tensor x64 = f64(xv, shape), p64 = Tensor::empty(shape, DType::F64),
             y64 = dropout ? Tensor::empty(shape, DType::F64) : p64;
      kernels::scale_mask_softmax_fwd_cpu(x32, mask, a, p32, y32);
      kernels::scale_mask_softmax_fwd_cpu(x64, mask, a, p64, y64);
      const float *pp = p32.data<float>(), *yp = y32.data<float>();
      const double *qp = p64.data<double>(), *zp = y64.data<double>();
      // Relative error: e^d has condition number |d|, so the f32 rounding of the scores (|z| <= 4.4
      // here, half an ulp each) alone moves p by up to ~(|z_j| + |max z|) 2^-24 = 5e-7; then exp's
      // 1.2 ulp and the normalisation. The parity tests allow 1e-5 between the CPU and CUDA's f32.
      double worst = 0;
      int exact_zero_misses = 0, mask_misses = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / (H * S * cols);
        const bool masked = b == 0 && (i % cols) % 3 == 1;
        if (masked) exact_zero_misses += pp[i] != 0.0f;
        if (qp[i] > 0) worst = std::max(worst, std::fabs(pp[i] - qp[i]) / qp[i]);
        mask_misses += (yp[i] == 0.0f) != (zp[i] == 0.0);  // the same dropout mask
        if (zp[i] > 0) worst = std::max(worst, std::fabs(yp[i] - zp[i]) / zp[i]);
      }
      MESSAGE("softmax f32 vs f64: worst relative error ", worst);
      CHECK(worst <= 1.2e-6);
      CHECK(exact_zero_misses == 0);
      CHECK(mask_misses == 0);
      for (int64_t j = 0; j < cols; ++j)  // batch 1 keeps no key: uniform over all keys
        CHECK(pp[(H * S) * cols + j] == doctest::Approx(1.0 / static_cast<double>(cols)).epsilon(3e-7));

      // Backward from the same probabilities: dy through the mask, the dot product in double.
      const std::vector<float> gv = values(7, static_cast<size_t>(n), -1.0f, 1.0f);
      std::vector<float> pv(pp, pp + n);
      Tensor dx32 = Tensor::empty(shape), dx64 = Tensor::empty(shape, DType::F64);
      kernels::scale_mask_softmax_bwd_cpu(f32(pv, shape), f32(gv, shape), mask, a, dx32);
      kernels::scale_mask_softmax_bwd_cpu(f64(pv, shape), f64(gv, shape), mask, a, dx64);
      const float* dp = dx32.data<float>();
      const double* ep = dx64.data<double>();
      // dx = scale p (g - dot) is a difference, so its error is measured against its terms' size,
      // scale p (|g| + |dot|) <= scale p 2.5 (|dy| <= 1, dropout's 1 / 0.8): the f32 kernel rounds
      // the result once and (with dropout) the scale 1 / (1 - p) in f32, as the old f32 path did.
      double worst_dx = 0;
      int masked_nonzero = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool masked = i / (H * S * cols) == 0 && (i % cols) % 3 == 1;
        if (masked) masked_nonzero += dp[i] != 0.0f;
        const double size = a.scale * static_cast<double>(pv[i]) * 2.5;
        if (size > 0) worst_dx = std::max(worst_dx, std::fabs(dp[i] - ep[i]) / size);
      }
      MESSAGE("softmax backward f32 vs f64: worst error ", worst_dx, " of scale p (|g| + |dot|)");
      CHECK(worst_dx <= 1.2e-7);  // measured 4.8e-8: an f32 rounding or two (2^-24 each)
      CHECK(masked_nonzero == 0);
    }
  }
}

TEST_CASE("CPU bias_gelu in f32 is within 6e-7 of the erf form; its gradient within 1e-6 |dy|") {
  const int64_t rows = 301, C = 37, n = rows * C;
  const std::vector<float> xv = values(3, static_cast<size_t>(n), -14.0f, 14.0f);
  const std::vector<float> bv = values(4, static_cast<size_t>(C), -1.0f, 1.0f);
  const std::vector<float> gv = values(5, static_cast<size_t>(n), -2.0f, 2.0f);
  Tensor x = f32(xv, {rows, C}), b = f32(bv, {C}), dy = f32(gv, {rows, C});
  Tensor y = Tensor::empty({rows, C}), dx = Tensor::empty({rows, C}), db = Tensor::empty({C});
  kernels::bias_gelu_cpu(x, b, y);
  kernels::bias_gelu_backward_cpu(dy, x, b, dx, db);
  double worst_y = 0, worst_dx = 0, worst_db = 0;
  std::vector<double> db_want(static_cast<size_t>(C), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double z = static_cast<float>(xv[i] + bv[i % C]);  // the kernel adds in f32
    worst_y = std::max(worst_y, std::fabs(y.data<float>()[i] - z * phi_cdf(z)));
    const double g = gv[i] * (phi_cdf(z) + z * phi_pdf(z));
    worst_dx = std::max(worst_dx, std::fabs(dx.data<float>()[i] - g) / std::fabs(gv[i]));
    db_want[i % C] += g;
  }
  for (int64_t c = 0; c < C; ++c) worst_db = std::max(worst_db, std::fabs(db.data<float>()[c] - db_want[c]));
  MESSAGE("bias_gelu f32: y ", worst_y, " abs, dx ", worst_dx, " x |dy|, dbias ", worst_db, " abs");
  CHECK(worst_y <= 6e-7);
  CHECK(worst_dx <= 1e-6);
  CHECK(worst_db <= 1e-5);  // measured 1.7e-6: the elements' errors, of both signs, summed over 301 rows
}
