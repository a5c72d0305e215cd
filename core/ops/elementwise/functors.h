// core/ops/elementwise/functors.h: elementwise math, written once, compiled for both backends.
//
// Each functor is a small struct with a templated call operator marked TANDEM_HD, which is
// __host__ __device__ under nvcc and plain inline otherwise (core/ops/common/hd.h). The CPU loop
// (cpu.cpp) and the CUDA kernels (cuda.cu) instantiate the same functors, so forward and backward
// math cannot drift apart between backends. T is double (CPU gradient checks) or float (everything else:
// 16-bit inputs are widened to float before the functor runs and narrowed after).
// A functor may carry parameters as float fields: the op's alpha and beta fill them in declaration
// order (core/ops/elementwise/visit.h), so a one-field functor gets alpha and a two-field one
// alpha and beta.
//
// The two lists at the end are the elementwise op table: a functor's position in its list is its
// op code (kernels::Unary / kernels::Binary), and nothing else maps codes to functors. A new
// elementwise op is a functor here, appended to its list, plus its op function in
// core/ops/elementwise/elementwise.h/.cpp; both backends pick it up unchanged.
#pragma once
#include <cmath>
#include <type_traits>

#include "core/ops/common/hd.h"

namespace tandem::fn {

// ---- unary: y = f(x) ----
struct Scale {
  float alpha;
  template <typename T> TANDEM_HD T operator()(T x) const { return x * static_cast<T>(alpha); }
};
struct AddScalar {
  float alpha;
  template <typename T> TANDEM_HD T operator()(T x) const { return x + static_cast<T>(alpha); }
};
// PyTorch's threshold(x, 0, 0): x <= 0 ? 0 : x. Written with <= (not x > 0 ? x : 0) so that NaN,
// for which every comparison is false, comes out as NaN: a diverged activation must stay visible
// to the checks downstream (issue 20). relu(0) = relu(-0) = +0.
struct Relu {
  template <typename T> TANDEM_HD T operator()(T x) const { return x <= T(0) ? T(0) : x; }
};
// GELU, exact form x * Phi(x) with Phi the normal CDF (PyTorch's default, and BERT's).
struct Gelu {
  template <typename T> TANDEM_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  }
};
struct Square {
  template <typename T> TANDEM_HD T operator()(T x) const { return x * x; }
};
// x^alpha: rsqrt is alpha = -0.5, the reciprocal alpha = -1 (dist/extras/sync_batchnorm.cpp). NaN for
// x < 0 unless alpha is an integer, as std::pow.
struct Pow {
  float alpha;
  template <typename T> TANDEM_HD T operator()(T x) const { return pow(x, static_cast<T>(alpha)); }
};

// ---- binary: y = f(a, b) ----
struct Add {
  template <typename T> TANDEM_HD T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  template <typename T> TANDEM_HD T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  template <typename T> TANDEM_HD T operator()(T a, T b) const { return a * b; }
};
// alpha * a + beta * b
struct Axpby {
  float alpha, beta;
  template <typename T> TANDEM_HD T operator()(T a, T b) const {
    return static_cast<T>(alpha) * a + static_cast<T>(beta) * b;
  }
};
// PyTorch's threshold_backward(dy, y, 0): dy where y > 0 or y is NaN, 0 where y <= 0. y is ReLU's
// output (or its input: the same signs). At 0 the subgradient 0 is used, as PyTorch does.
struct ReluBackward {
  template <typename T> TANDEM_HD T operator()(T dy, T y) const { return y <= T(0) ? T(0) : dy; }
};
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
struct GeluBackward {
  template <typename T> TANDEM_HD T operator()(T dy, T x) const {
    T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    T pdf = exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return dy * (cdf + x * pdf);
  }
};
// d/dx x^alpha = alpha x^(alpha - 1)
struct PowBackward {
  float alpha;
  template <typename T> TANDEM_HD T operator()(T dy, T x) const {
    return dy * static_cast<T>(alpha) * pow(x, static_cast<T>(alpha) - T(1));
  }
};

// ---- the op table: position = op code ----
template <typename... Fs>
struct OpList {};
using UnaryOps = OpList<Scale, AddScalar, Relu, Gelu, Square, Pow>;
using BinaryOps = OpList<Add, Sub, Mul, Axpby, ReluBackward, GeluBackward, PowBackward>;

// The position of F in the list, or -1 when it is not listed.
template <typename F, typename... Fs>
constexpr int index_in(OpList<Fs...>) {
  constexpr bool same[] = {std::is_same_v<F, Fs>..., false};
  for (int i = 0; i < static_cast<int>(sizeof...(Fs)); ++i)
    if (same[i]) return i;
  return -1;
}

}  // namespace tandem::fn
