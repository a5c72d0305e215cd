// tests/test_pow_grad.cpp: ops::pow (x^p, added for dist/extras/sync_batchnorm's rsqrt and reciprocal):
// values against std::pow, and f64 finite-difference gradients for the exponents it is used with
// (-0.5, -1) and a few others. Inputs are kept in [0.5, 2]: pow with a fractional exponent is
// undefined below zero and steep near it.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

TEST_CASE("pow matches std::pow") {
  Tensor x = rand_f64({9}, 1, 0.5, 2.0, false);
  for (float p : {-0.5f, -1.0f, 2.0f, 0.5f}) {
    std::vector<double> got = ops::pow(x, p).to_vector_f64(), in = x.to_vector_f64();
    for (size_t i = 0; i < in.size(); ++i) CHECK(got[i] == doctest::Approx(std::pow(in[i], double(p))).epsilon(1e-14));
  }
  // f32 too: the CPU path runs the same functor in float.
  std::vector<float> y = ops::pow(Tensor::from_vector({4.0f, 0.25f}, {2}), -0.5f).to_vector();
  CHECK(y[0] == doctest::Approx(0.5).epsilon(1e-7));
  CHECK(y[1] == doctest::Approx(2.0).epsilon(1e-7));
}

TEST_CASE("pow gradient (rsqrt, reciprocal, square root, cube)") {
  for (float p : {-0.5f, -1.0f, 0.5f, 3.0f}) {
    CAPTURE(p);
    CHECK(gradcheck([p](auto& in) { return ops::pow(in[0], p); }, {rand_f64({7}, 2, 0.5, 2.0)}) == "");
  }
  // An integer exponent is defined for negative inputs too.
  CHECK(gradcheck([](auto& in) { return ops::pow(in[0], 3.0f); }, {rand_f64({7}, 3, -2.0, -0.5)}) == "");
}
