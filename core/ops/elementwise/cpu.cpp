// core/ops/elementwise/cpu.cpp: CPU loops over the shared functors (core/ops/elementwise/functors.h).
// One exception: GELU and its gradient in f32 (training, and 16-bit tensors widened to f32) call
// core/ops/common/cpu/f32_math.h's gelu / gelu_grad, the functions the fused bias_gelu runs
// (core/ops/fused_bias/cpu.cpp), so the unfused op (the MLM head's) and the fused one give the same
// f32 bits (tests/test_fused_bias_grad.cpp) and the loop vectorises instead of calling libm's double
// erf per element. f64 (the gradient checks) keeps fn::Gelu's libm erf; CUDA keeps the functors.
#include <type_traits>

#include "core/ops/common/cpu/f32_math.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/elementwise/functors.h"
#include "core/ops/elementwise/visit.h"

namespace tandem::kernels {
namespace {

struct CpuGelu {
  float operator()(float x) const { return f32_math::gelu(x); }
  double operator()(double x) const { return fn::Gelu{}(x); }
};
struct CpuGeluBackward {
  float operator()(float dy, float x) const { return f32_math::gelu_grad(dy, x); }
  double operator()(double dy, double x) const { return fn::GeluBackward{}(dy, x); }
};

// The functor the CPU loop runs for F: F itself, except GELU's two (see the file's contract).
template <typename F>
auto cpu_functor(F f) {
  if constexpr (std::is_same_v<F, fn::Gelu>)
    return CpuGelu{};
  else if constexpr (std::is_same_v<F, fn::GeluBackward>)
    return CpuGeluBackward{};
  else
    return f;
}

template <typename T, typename F>
void map1(const Tensor& x, Tensor& y, F f) {
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
}

template <typename T, typename F>
void map2(const Tensor& a, const Tensor& b, Tensor& y, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  int64_t n = a.numel(), nb = b.numel();
  if (nb == n) {
    for (int64_t i = 0; i < n; ++i) py[i] = f(pa[i], pb[i]);
  } else {  // trailing broadcast: walk rows of length nb
    for (int64_t r = 0; r < n; r += nb)
      for (int64_t j = 0; j < nb; ++j) py[r + j] = f(pa[r + j], pb[j]);
  }
}

}  // namespace

void unary_cpu(Unary op, const Tensor& x, Tensor& y, float alpha) {
  TANDEM_CPU_WIDEN_16BIT(unary_cpu, op, x, y, alpha);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T,
                         [&] { visit_unary(op, alpha, [&](auto f) { map1<T>(x, y, cpu_functor(f)); }); });
}

void binary_cpu(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta) {
  TANDEM_CPU_WIDEN_16BIT(binary_cpu, op, a, b, y, alpha, beta);
  TANDEM_CPU_FLOAT_TYPES(a.dtype(), T, [&] {
    visit_binary(op, alpha, beta, [&](auto f) { map2<T>(a, b, y, cpu_functor(f)); });
  });
}

void sum_leading_cpu(const Tensor& src, Tensor& dst) {
  TANDEM_CPU_WIDEN_16BIT(sum_leading_cpu, src, dst);
  TANDEM_CPU_FLOAT_TYPES(src.dtype(), T, [&] {
    int64_t m = src.size(0), n = src.size(1);
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    // Accumulate in double: the rows can number N*H*W (hundreds of thousands).
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[j] += s[i * n + j];
    for (int64_t j = 0; j < n; ++j) d[j] = static_cast<T>(acc[j]);
  });
}

}  // namespace tandem::kernels
