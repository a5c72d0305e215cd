// tests/test_fused_bias_cpu.cpp: the CPU bias tails (core/ops/fused_bias/cpu.cpp) give exactly,
// bit for bit, what a plain per-element loop over the shared functors gives: element i of a
// [rows, C] tensor takes bias[i % C], and each bias gradient is its column's sum in double, in row
// order. The kernels walk rows and columns instead of taking i % C (for speed); these pin that the
// walk visits the same columns in the same order. C is odd (37) so that a wrong column stride shows.
// GELU in f32 is f32_math's (core/ops/common/cpu/f32_math.h, checked against erf in
// tests/test_cpu_f32_kernels.cpp), so the f32 loop below calls that; f64 is fn::BiasGelu's.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/ops/common/cpu/f32_math.h"
#include "core/ops/fused_bias/functors.h"
#include "core/ops/fused_bias/kernels.h"
#include "core/tensor.h"

using namespace tandem;

namespace {
constexpr int64_t kRows = 11, kC = 37, kN = kRows * kC;

Tensor values(uint32_t seed, const Shape& shape, DType dt) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  uint32_t s = seed;
  for (auto& x : v) {  // a small LCG: signed values of both signs, some exactly 0
    s = s * 1664525u + 1013904223u;
    x = static_cast<double>(static_cast<int32_t>(s >> 8) % 2001 - 1000) / 250.0;
  }
  return Tensor::from_vector_f64(v, shape, dt);
}

template <typename T>
void check_bits(const Tensor& got, const std::vector<T>& want) {
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  CHECK(std::memcmp(got.data_ptr(), want.data(), want.size() * sizeof(T)) == 0);
}

template <typename T>
std::vector<T> column_sums(const std::vector<T>& d) {
  std::vector<double> acc(kC, 0.0);
  for (int64_t i = 0; i < kN; ++i) acc[static_cast<size_t>(i % kC)] += d[static_cast<size_t>(i)];
  return std::vector<T>(acc.begin(), acc.end());
}

// The GELU the CPU kernels run, per element: see the file's contract.
template <typename T> T bias_gelu(T x, T b) {
  if constexpr (std::is_same_v<T, float>) return kernels::f32_math::gelu(x + b);
  else return fn::BiasGelu{}(x, b);
}
template <typename T> T bias_gelu_backward(T dy, T x, T b) {
  if constexpr (std::is_same_v<T, float>) return kernels::f32_math::gelu_grad(dy, x + b);
  else return fn::BiasGeluBackward{}(dy, x, b);
}

template <typename T>
void run_all(DType dt) {
  const Tensor x = values(1, {kRows, kC}, dt), dy = values(2, {kRows, kC}, dt), r = values(3, {kRows, kC}, dt);
  const Tensor b = values(4, {kC}, dt);
  const T *xp = x.data<T>(), *gp = dy.data<T>(), *rp = r.data<T>(), *bp = b.data<T>();
  const kernels::DropoutMask mask{0.25f, 1234, 56};
  const fn::MaybeDropout drop{mask.p, mask.seed, mask.offset};
  std::vector<T> want(static_cast<size_t>(kN));

  SUBCASE("bias_relu and its backward") {
    Tensor y = Tensor::empty({kRows, kC}, dt);
    kernels::bias_relu_cpu(x, b, y);
    for (int64_t i = 0; i < kN; ++i) want[i] = fn::BiasRelu{}(xp[i], bp[i % kC]);
    check_bits(y, want);
    Tensor dx = Tensor::empty({kRows, kC}, dt), db = Tensor::empty({kC}, dt);
    kernels::relu_bias_backward_cpu(dy, y, dx, db);
    const T* yp = y.data<T>();
    for (int64_t i = 0; i < kN; ++i) want[i] = fn::ReluBackward{}(gp[i], yp[i]);
    check_bits(dx, want);
    check_bits(db, column_sums(want));
  }
  SUBCASE("bias_gelu and its backward") {
    Tensor y = Tensor::empty({kRows, kC}, dt);
    kernels::bias_gelu_cpu(x, b, y);
    for (int64_t i = 0; i < kN; ++i) want[i] = bias_gelu(xp[i], bp[i % kC]);
    check_bits(y, want);
    Tensor dx = Tensor::empty({kRows, kC}, dt), db = Tensor::empty({kC}, dt);
    kernels::bias_gelu_backward_cpu(dy, x, b, dx, db);
    for (int64_t i = 0; i < kN; ++i) want[i] = bias_gelu_backward(gp[i], xp[i], bp[i % kC]);
    check_bits(dx, want);
    check_bits(db, column_sums(want));
  }
  SUBCASE("bias_dropout_add and its backward") {
    Tensor y = Tensor::empty({kRows, kC}, dt);
    kernels::bias_dropout_add_cpu(x, b, r, y, mask);
    const fn::BiasDropoutAdd f{drop};
    for (int64_t i = 0; i < kN; ++i) want[i] = f(xp[i], bp[i % kC], rp[i], static_cast<uint64_t>(i));
    check_bits(y, want);
    Tensor dx = Tensor::empty({kRows, kC}, dt), db = Tensor::empty({kC}, dt);
    kernels::dropout_bias_backward_cpu(dy, dx, db, mask);
    for (int64_t i = 0; i < kN; ++i) want[i] = drop(gp[i], static_cast<uint64_t>(i));
    check_bits(dx, want);
    check_bits(db, column_sums(want));
    Tensor dx_only = Tensor::empty({kRows, kC}, dt), none;  // no bias gradient asked for
    kernels::dropout_bias_backward_cpu(dy, dx_only, none, mask);
    check_bits(dx_only, want);
  }
}
}  // namespace

TEST_CASE("CPU bias tails equal the per-element loop bit for bit, f32") { run_all<float>(DType::F32); }
TEST_CASE("CPU bias tails equal the per-element loop bit for bit, f64") { run_all<double>(DType::F64); }

TEST_CASE("a tensor that is not rows of the bias's length is refused") {
  const Tensor x = Tensor::zeros({10}), b = Tensor::zeros({3});
  Tensor y = Tensor::empty({10});
  CHECK_THROWS_WITH_AS(kernels::bias_relu_cpu(x, b, y), doctest::Contains("not rows of 3 columns"), Error);
}
