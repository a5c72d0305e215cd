// tests/gpu_pow_parity.cpp: CPU vs CUDA parity for ops::pow, forward and backward, in f32, bf16
// and f16. Inputs are positive ([0.5, 2.5)): fractional exponents are undefined below zero.
// Tolerances: the CPU evaluates pow in double and rounds once to f32; CUDA's pow is within a few
// f32 ulps; the GPU then rounds each result to the dtype (1 ulp: 2^-8 bf16, 2^-11 f16), and the
// backward multiplies two such values (dy and x^(p-1)), so two roundings.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/parity.h"

using namespace tandem;
using testing::parity_check;
using testing::Tolerance;

TEST_CASE("pow: rsqrt, reciprocal, cube") {
  Generator g(11);
  Tensor x = Tensor::empty({48});
  uniform_(x, 0.5, 2.5, g);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    Tolerance tol = t == DType::BF16 ? Tolerance{2e-2, 1e-6, "bf16: two roundings of 2^-8"}
                  : t == DType::F16  ? Tolerance{4e-3, 1e-6, "f16: two roundings of 2^-11"}
                                     : Tolerance{1e-5, 1e-7, "f32: CUDA pow vs libm pow, a few ulps"};
    for (float p : {-0.5f, -1.0f, 3.0f}) {
      CAPTURE(p);
      auto f = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::pow(in[0], p)}; };
      CHECK(parity_check(f, {x}, t, tol) == "");
    }
  }
}
