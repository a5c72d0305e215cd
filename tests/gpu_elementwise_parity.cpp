// tests/gpu_elementwise_parity.cpp: CPU vs CUDA parity for the elementwise ops (add/sub/mul with
// and without trailing broadcast, scale, add_scalar, axpby, relu, gelu, square, and the fused
// bias_gelu), the in-place variants, and casts between f32, bf16 and f16; forward and backward,
// in f32, bf16 and f16. (bias_dropout_add sits beside dropout in gpu_opsa_parity.cpp; misaligned
// views, one element, very tall/wide bias gradients and > 2^31 elements in gpu_vector_access_parity.cpp.)
//
// Both backends see the same inputs, already rounded to the dtype (tests/support/parity.h). The
// functors are shared (core/ops/elementwise/functors.h) and run in f32 on both sides, so the differences are:
//   - the GPU rounds each result to the dtype (half an ulp, up to one where two f32 values straddle
//     a rounding boundary): 2^-8 relative for bf16, 2^-11 for f16;
//   - libm vs CUDA erf/exp (gelu): a few f32 ulps;
//   - broadcast gradients are sums over rows: f32 on the GPU vs double on the CPU.
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

TEST_CASE("vectorised maps: sizes with a tail, broadcast lengths on and off the vector width") {
  // The CUDA maps move 16 bytes per access when the pointers are aligned and a broadcast b's length
  // is a multiple of the vector width (4 f32, 8 f16/bf16); otherwise they take the scalar kernel.
  // n = 111 leaves a tail after the vectors; b of 8 and 16 takes the vectorised broadcast, b of
  // 37 the scalar one.
  Generator g(5);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    CHECK(parity_check(binary(ops::add), {randn({3, 37}, g), randn({3, 37}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::add), {randn({3, 37}, g), randn({37}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::add), {randn({7, 2, 8}, g), randn({8}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::sub), {randn({5, 16}, g), randn({16}, g)}, t, tol) == "");
    auto relu = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::relu(in[0])}; };
    CHECK(parity_check(relu, {randn({111}, g)}, t, tol) == "");
    CHECK(parity_check(relu, {randn({3}, g)}, t, tol) == "");  // shorter than one vector: tail only
  }
}

TEST_CASE("relu_ in place: same values and gradient as relu") {
  Generator g(6);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      Tensor y = ops::scale(in[0], 1.0f);  // a non-leaf for relu_ to overwrite
      ops::relu_(y);
      return std::vector<Tensor>{y};
    };
    CHECK(parity_check(f, {randn({4, 67}, g)}, t, rounded_once(t)) == "");
  }
}

TEST_CASE("bias gradient: many rows take the 2-D partials + finish reduction") {
  // [4096, 64] + [64]: the bias gradient sums 4096 rows per column, split into 32 row chunks of 128
  // whose partials are added in order. f32 sums of 4096 N(0,1) terms (|sum| ~ 64, sum|x| ~ 3300)
  // differ from the CPU's double by ~1e-4 in the worst column: atol 2e-3 covers that with room.
  // [300, 1000] is the wide case (32 column blocks, 9 chunks); [5, 3] the single-chunk one.
  Generator g(7);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    tol.atol = 2e-3;
    tol.why = "bias gradient: f32 column sums of 300-4096 rows vs double, then one rounding to the dtype";
    CHECK(parity_check(binary(ops::add), {randn({4096, 64}, g), randn({64}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::add), {randn({300, 1000}, g), randn({1000}, g)}, t, tol) == "");
    CHECK(parity_check(binary(ops::add), {randn({5, 3}, g), randn({3}, g)}, t, tol) == "");
  }
}

TEST_CASE("bias_gelu: vectorised and scalar maps, one-chunk and multi-chunk bias gradients") {
  // Forward: gelu(x + b) in f32 on both sides, one rounding to the dtype (libm vs CUDA erf in f32).
  // Backward: dx is one rounding of dy * gelu'(x + b); db sums the unrounded f32 dx over the rows
  // (f32 partials on the GPU, double on the CPU) and rounds once. [4096, 64] takes 32 row chunks;
  // its column sums of 4096 O(1) terms differ from the double ones by ~1e-4, hence atol 2e-3 as in
  // the bias-gradient case above. C = 64 and 16 take the 16-byte maps, C = 37 the scalar one.
  Generator g(8);
  auto f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::bias_gelu(in[0], in[1])}; };
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    CHECK(parity_check(f, {randn({3, 5, 16}, g), randn({16}, g)}, t, tol) == "");
    CHECK(parity_check(f, {randn({6, 37}, g), randn({37}, g)}, t, tol) == "");
    tol.atol = 2e-3;
    tol.why = "bias gradient: f32 column sums of 4096 rows vs double, then one rounding to the dtype";
    CHECK(parity_check(f, {randn({4096, 64}, g), randn({64}, g)}, t, tol) == "");
  }
}

TEST_CASE("fused bias ops on an empty batch: the CUDA bias gradient is zeros, as the CPU's") {
  // x [0, C]: dx is empty, but the bias gradient (column sums over no rows) must still be written.
  // A NaN-filled [C] block is freed first, so a dbias left unwritten most likely reads NaN from
  // the pool rather than a lucky zero.
  for (DType t : kDtypes)
    for (bool dropout : {false, true}) {
      CAPTURE(dtype_name(t));
      CAPTURE(dropout);
      const Device gpu = Device::cuda(0);
      { Tensor::empty({40}, t, gpu).fill_(NAN); }
      Tensor x = Tensor::zeros({0, 40}, t, gpu).set_requires_grad(true);
      Tensor b = Tensor::zeros({40}, t, gpu).set_requires_grad(true);
      Generator g(3);
      Tensor y = dropout ? ops::bias_dropout_add(x, b, Tensor::zeros({0, 40}, t, gpu), 0.3f, true, g)
                         : ops::bias_gelu(x, b);
      y.backward(Tensor::zeros({0, 40}, t, gpu));
      REQUIRE(b.grad().defined());
      CHECK(b.grad().to_vector() == std::vector<float>(40, 0.0f));
    }
}

TEST_CASE("bias_gelu on the GPU equals the unfused add + gelu in f32, rounded once") {
  Generator g(9);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tensor x = ops::cast_raw(randn({64, 40}, g), t).to(Device::cuda(0));
    Tensor b = ops::cast_raw(randn({40}, g), t).to(Device::cuda(0));
    // The reference computes as the fused kernel does: x + b and the GELU in f32 (the inputs cast
    // up exactly), then one rounding to the dtype. Unfused in the dtype itself, x + b would be
    // rounded before the GELU, and GELU's negative tail magnifies that rounding: there
    // d ln gelu(s) / ds ~ -s, so at s ~ -3 (gelu ~ -0.005) bf16's 2^-9 relative error of s
    // becomes ~2 % of the result - 6 of 2,560 elements off by up to 1.2e-4 on issue 18's H100 run,
    // the reference being the one a rounding off.
    const Tensor reference = ops::cast_raw(ops::gelu(ops::add(x.to(DType::F32), b.to(DType::F32))), t);
    CHECK(compare_values("bias_gelu vs gelu(add) in f32", reference.to_vector(), ops::bias_gelu(x, b).to_vector(),
                         rounded_once(t)) == "");
  }
}

namespace {
// n random values with NaN, +inf, -inf and 0 planted at spread-out positions (also in the tail
// that the 16-byte maps leave to their first threads, when n is not a multiple of the vector).
Tensor with_nonfinite(int64_t n, Generator& g) {
  std::vector<float> v = randn({n}, g).to_vector();
  const float planted[] = {NAN, INFINITY, -INFINITY, 0.0f, NAN};
  for (int64_t i = 0; i < n; i += 7) v[i] = planted[(i / 7) % 5];
  v[n - 1] = NAN;
  return Tensor::from_vector(v, {n});
}
}  // namespace

TEST_CASE("relu, relu_ and square with NaN and inf: the GPU follows the CPU's (PyTorch's) rules") {
  // tests/test_nonfinite_ops.cpp states the rules; here both backends must agree on them, on the
  // vectorised map (111 = 27 vectors of 4 + a tail) and on a scalar-only size (3).
  Generator g(10);
  auto relu = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::relu(in[0])}; };
  auto relu_inplace = [](const std::vector<Tensor>& in) {
    Tensor y = ops::scale(in[0], 1.0f);
    ops::relu_(y);
    return std::vector<Tensor>{y};
  };
  auto square = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::square(in[0])}; };
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    Tolerance tol = rounded_once(t);
    tol.nonfinite_equal = true;
    for (int64_t n : {111, 3}) {
      CAPTURE(n);
      Tensor x = with_nonfinite(n, g);
      CHECK(parity_check(relu, {x}, t, tol) == "");
      CHECK(parity_check(relu_inplace, {x}, t, tol) == "");
      CHECK(parity_check(square, {x}, t, tol) == "");
    }
    // And the values themselves, not only their agreement.
    Tensor y = ops::relu(ops::cast_raw(Tensor::from_vector({NAN, -1.0f, INFINITY}, {3}), t).to(Device::cuda(0)));
    std::vector<float> v = y.to_vector();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == 0.0f);
    CHECK(v[2] == INFINITY);
  }
}
