// tests/gpu_elementwise_parity.cpp: CPU vs CUDA parity for the elementwise ops (add/sub/mul with
// and without trailing broadcast, scale, add_scalar, axpby, relu, gelu, square), the in-place
// variants, and casts between f32, bf16 and f16; forward and backward, in f32, bf16 and f16.
//
// Both backends see the same inputs, already rounded to the dtype (tests/support/parity.h). The
// functors are shared (core/ops/functors.h) and run in f32 on both sides, so the differences are:
//   - the GPU rounds each result to the dtype (half an ulp, up to one where two f32 values straddle
//     a rounding boundary): 2^-8 relative for bf16, 2^-11 for f16;
//   - libm vs CUDA erf/exp (gelu): a few f32 ulps;
//   - broadcast gradients are sums over rows: f32 on the GPU vs double on the CPU.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

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
const PerDtype rounded_once = testing::rounded_once("f32: libm vs CUDA math functions, f32 vs double row sums");

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
Fn binary(Tensor (*op)(const Tensor&, const Tensor&)) {
  return [op](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0], in[1])}; };
}

}  // namespace

TEST_CASE("add, sub, mul: same shape and trailing broadcast") {
  Generator g(1);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    for (auto op : {ops::add, ops::sub, ops::mul}) {
      CHECK(parity_check(binary(op), {randn({3, 4, 5}, g), randn({3, 4, 5}, g)}, t, tol) == "");
    }
    // Broadcast b's gradient sums 12 rows. For add/sub the summed values are the (exact) upstream
    // gradient, so one final rounding remains.
    CHECK(parity_check(binary(ops::add), {randn({2, 2, 3, 5}, g), randn({5}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::sub), {randn({4, 3, 5}, g), randn({3, 5}, g)}, t, tol) == "");
    // For mul the GPU rounds each product g * a to the dtype before the f32 row sum, the CPU does
    // not: 12 terms of size ~1, each off by up to 2^-9 (bf16) / 2^-12 (f16), can cancel down to a
    // small sum, so an absolute allowance of a few such errors is needed.
    Tolerance mul_tol = tol;
    if (t == DType::BF16) mul_tol = {1e-2, 3e-2, "bf16: db sums 12 products each rounded to bf16 (2^-9 each)"};
    if (t == DType::F16) mul_tol = {2e-3, 4e-3, "f16: db sums 12 products each rounded to f16 (2^-12 each)"};
    CHECK(parity_check(binary(ops::mul), {randn({4, 3, 5}, g), randn({5}, g)}, t, mul_tol) == "");
  }
}

TEST_CASE("unary ops: scale, add_scalar, axpby, relu, gelu, square") {
  Generator g(2);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    auto one = [](auto op) { return [op](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0])}; }; };
    CHECK(parity_check(one([](const Tensor& x) { return ops::scale(x, -1.5f); }), {randn({40}, g)}, t, tol) == "");
    CHECK(parity_check(one([](const Tensor& x) { return ops::add_scalar(x, 0.25f); }), {randn({40}, g)}, t, tol) == "");
    CHECK(parity_check(one([](const Tensor& x) { return ops::relu(x); }), {randn({64}, g)}, t, tol) == "");
    CHECK(parity_check(one([](const Tensor& x) { return ops::gelu(x); }), {randn({64}, g)}, t, tol) == "");
    CHECK(parity_check(one([](const Tensor& x) { return ops::square(x); }), {randn({40}, g)}, t, tol) == "");
    auto axpby = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::axpby(in[0], in[1], 0.5f, -2.0f)}; };
    CHECK(parity_check(axpby, {randn({6, 7}, g), randn({6, 7}, g)}, t, tol) == "");
  }
}

TEST_CASE("in-place add_ (with broadcast), scale_, axpby_") {
  Generator g(3);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto rounded = [&](const Shape& s) { return ops::cast_raw(ops::cast_raw(randn(s, g), t), DType::F32); };
    Tensor a = rounded({4, 6}), b = rounded({6}), c = rounded({4, 6});
    Tensor ga = ops::cast_raw(a, t).to(Device::cuda(0));
    Tensor gb = ops::cast_raw(b, t).to(Device::cuda(0));
    Tensor gc = ops::cast_raw(c, t).to(Device::cuda(0));
    // Each GPU step rounds to the dtype; the CPU keeps f32. Three chained ops: three roundings.
    Tolerance tol = rounded_once(t);
    tol.rtol *= 3;
    ops::add_(a, b);
    ops::add_(ga, gb);
    ops::scale_(a, 0.75f);
    ops::scale_(ga, 0.75f);
    ops::axpby_(a, c, -0.5f, 2.0f);
    ops::axpby_(ga, gc, -0.5f, 2.0f);
    CHECK(compare_values("in-place chain", a.to_vector(), ga.to_vector(), tol) == "");
  }
}

TEST_CASE("casts between f32, bf16 and f16, and their gradients") {
  Generator g(4);
  for (DType from : kDtypes) {
    for (DType to : kDtypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      // Forward: both sides round the same representable value once, to nearest even, so outputs
      // agree exactly. Backward: the GPU's upstream gradient is stored in `to` and cast back to
      // `from`; the CPU's stays f32. So the gradient carries one rounding to the coarser dtype.
      DType coarse = (from == DType::BF16 || to == DType::BF16) ? DType::BF16
                     : (from == DType::F16 || to == DType::F16) ? DType::F16
                                                                 : DType::F32;
      auto f = [to](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::cast(in[0], to)}; };
      CHECK(parity_check(f, {randn({50}, g)}, from, rounded_once(coarse)) == "");
    }
  }
}
