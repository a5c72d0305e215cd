// tests/support/gradcheck.h: finite-difference gradient checks in f64 on the CPU.
//
// gradcheck(f, inputs) checks every floating input that requires grad. The scalar probed is
// L = <f(inputs), W> with a fixed random W, so the analytic gradient is f's backward applied to W
// (one backward call), and the numeric gradient is the central difference (L(x+h) - L(x-h)) / 2h,
// element by element. In f64 with h = 1e-6 the truncation error is ~h^2 and the rounding error
// ~1e-16/h, so agreement to ~1e-6 relative is expected for smooth ops. Kinks (ReLU at 0, max-pool
// ties) break finite differences: callers must keep inputs away from them (see Caffe's
// GradientChecker, which has the same caveat).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
  uint64_t seed = 1234;
};

// Returns "" on success, or a description of the first mismatches (input, index, both values).
std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      const GradcheckOptions& opt = {});

// Largest |a[i] - b[i]| of two equal-length value lists (an error when the lengths differ), for
// tests that compare an op with the op sequence it replaces.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);

// Random f64 CPU tensor in [lo, hi) that requires grad.
Tensor rand_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0, bool requires_grad = true);

}  // namespace tandem::testing
