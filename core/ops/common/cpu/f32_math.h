// core/ops/common/cpu/f32_math.h: the f32 exp and normal CDF that the CPU's f32 softmax and GELU
// kernels call (internal). Branch-free and libm-free, so that GCC vectorises the loops calling
// them; libm's scalar double exp/erf, one call per element, were ~9 % of bert_small's CPU step
// (perf, apps/results/2026-11-28-cpu-2core/README.md). A file that calls them in a loop needs
// -fno-trapping-math (core/CMakeLists.txt), or GCC keeps the selects as branches and the loop scalar.
//
// Accuracy (tests/test_f32_math.cpp pins it against libm in double over the whole f32 range used):
//   exp_nonpositive(x):   within 2 ulp of e^x for -87.33 <= x <= 0; exactly 0 below -87.33 (e^x
//                         is then under f32's smallest normal, and softmax's masked keys, whose
//                         score is -FLT_MAX, must get probability exactly 0); NaN stays NaN.
//                         x > 0 is outside the contract (the callers subtract a row maximum or
//                         negate a square).
//   normal_cdf(x, pdf):   Phi(x) for x >= 0 within 2.5e-7 absolute; for x < 0 (computed as
//                         erfc / 2, so without 1 + erf's cancellation) within 9e-7 relative down to
//                         x = -5, growing to 4e-6 at x = -13 as the f32 rounding of x^2 / 2 is
//                         scaled by x^2 / 2 in e^(-x^2/2); phi(x) the same. GELU: 4e-7 absolute.
// The f64 kernels (the gradient checks' path) keep libm in double; CUDA keeps its own erff/expf:
// the parity tests' f32 tolerance (1e-5 relative) covers both.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::kernels::f32_math {

// e^x for x <= 0. x = n ln2 + r with |r| <= ln2 / 2 (Cody and Waite's split of ln2 into a part with
// 9 significant bits, so n * kLn2Hi is exact for |n| <= 126, plus the rest), e^r by its Taylor
// series to r^7 (remainder < 0.347^8 / 8! = 5e-9 relative, under half an f32 ulp), times 2^n built
// in the exponent bits.
inline float exp_nonpositive(float x) {
  constexpr float kFlush = -87.33f;              // ln(2^-126) = -87.3365: 2^n stays a normal float
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;         // 355 / 512
  constexpr float kLn2Lo = -2.12194440054690583e-4f;  // ln 2 - 355 / 512
  constexpr float kRound = 12582912.0f;          // 1.5 * 2^23: t + kRound rounds t to an integer
  const float xc = x < kFlush ? kFlush : x;      // NaN compares false and stays NaN
  const float t = xc * kLog2e + kRound;          // n in t's low mantissa bits, n in [-126, 0]
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n: n + 127 in the exponent field; unsigned arithmetic (n is negative) wraps as intended.
  const uint32_t bits = (std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound) + 127u) << 23;
  const float v = p * std::bit_cast<float>(bits);
  return x < kFlush ? 0.0f : v;
}

// Phi(x), the standard normal CDF, and phi(x) = e^(-x^2/2) / sqrt(2 pi) in *pdf. With a = |x| /
// sqrt 2: erfc(a) = e^(-a^2) R(t), t = 1 / (1 + 0.3 a), where R (= erfcx) is a degree-9 polynomial
// fitted to erfcx in relative error for 0 <= a <= 9.5 (a Lawson-weighted least-squares fit in
// numpy against scipy.special.erfcx, this project's: apps/results/2026-11-28-cpu-2core/
// cpu3_fit_erfcx.py prints these coefficients; max relative error 2.1e-8 with them in f32). Beyond a = 9.34, e^(-a^2) is flushed to 0 and Phi is exactly 0 or 1.
// Phi(x) = erfc(a) / 2 for x < 0 and 1 - erfc(a) / 2 for x >= 0. The same e^(-x^2/2) serves phi.
inline float normal_cdf(float x, float* pdf) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  const float a = std::fabs(x) * kInvSqrt2;
  const float t = 1.0f / (1.0f + 0.3f * a);
  float r = -1.2513563e-01f;
  r = r * t + 4.6103460e-01f;
  r = r * t - 4.5265418e-01f;
  r = r * t + 4.6512744e-01f;
  r = r * t - 2.2897035e-02f;
  r = r * t + 1.7443466e-01f;
  r = r * t + 1.6316396e-01f;
  r = r * t + 1.6732286e-01f;
  r = r * t + 1.6962795e-01f;
  r = r * t - 2.4626990e-05f;
  const float e = exp_nonpositive(-0.5f * x * x);  // e^(-a^2)
  *pdf = e * kInvSqrt2Pi;
  const float half_erfc = 0.5f * e * r;
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

// GELU(x) = x Phi(x) (the erf form, fn::Gelu's) and its derivative Phi(x) + x phi(x) (fn::GeluBackward's).
inline float gelu(float x) {
  float pdf;
  return x * normal_cdf(x, &pdf);
}
inline float gelu_grad(float dy, float x) {
  float pdf;
  const float cdf = normal_cdf(x, &pdf);
  return dy * (cdf + x * pdf);
}

}  // namespace tandem::kernels::f32_math
