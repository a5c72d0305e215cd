// core/ops/elementwise/cpu.cpp: CPU loops over the shared functors (core/ops/elementwise/functors.h).
#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/elementwise/functors.h"
#include "core/ops/elementwise/visit.h"

namespace tandem::kernels {
namespace {

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
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] { visit_unary(op, alpha, [&](auto f) { map1<T>(x, y, f); }); });
}

void binary_cpu(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta) {
  TANDEM_CPU_WIDEN_16BIT(binary_cpu, op, a, b, y, alpha, beta);
  TANDEM_CPU_FLOAT_TYPES(a.dtype(), T, [&] { visit_binary(op, alpha, beta, [&](auto f) { map2<T>(a, b, y, f); }); });
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
