// core/ops/fused_bias/cpu.cpp: CPU reference for bias_gelu, bias_dropout_add and the bias + ReLU tails over the shared
// functors (core/ops/fused_bias/functors.h). Rows of [M, C], bias indexed by column. The bias
// gradient accumulates in double, as the CPU's other column sums (sum_leading_cpu) do.
// GELU in f32 (training, and 16-bit tensors widened to f32) is the exception to "the shared
// functors": its Phi comes from f32_math::normal_cdf (core/ops/common/cpu/f32_math.h), vectorised,
// where fn::Gelu would call libm's double erf per element (~4 % of bert_small's CPU step); within
// 4e-7 of the erf form (tests/test_fused_bias_cpu.cpp). In f64 it is fn::Gelu's libm erf, as before.
#include <vector>

#include "core/check.h"
#include "core/ops/common/cpu/f32_math.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/fused_bias/functors.h"
#include "core/ops/fused_bias/kernels.h"

namespace tandem::kernels {
namespace {

fn::MaybeDropout drop_of(DropoutMask m) { return {m.p, m.seed, m.offset}; }

// gelu(x + b) and its derivative times dy: f32_math's in f32, fn::BiasGelu's / fn::BiasGeluBackward's in f64.
struct CpuBiasGelu {
  float operator()(float x, float b) const { return f32_math::gelu(x + b); }
  double operator()(double x, double b) const { return fn::BiasGelu{}(x, b); }
};
struct CpuBiasGeluBackward {
  float operator()(float dy, float x, float b) const { return f32_math::gelu_grad(dy, x + b); }
  double operator()(double dy, double x, double b) const { return fn::BiasGeluBackward{}(dy, x, b); }
};

// The rows of a [n / C, C] tensor. The loops below walk rows, then columns, rather than taking
// i % C per element: a 64-bit division per element was most of bias_relu_cpu's time (4.6 % of
// VGG-16's CPU step, perf, apps/results/2026-11-28-cpu-2core/) and kept the loops scalar. Same
// elements in the same order, so the same bits.
int64_t rows_of(int64_t n, int64_t C) {
  TANDEM_CHECK(C > 0 ? n % C == 0 : n == 0, "fused bias op: ", n, " elements are not rows of ", C, " columns");
  return C > 0 ? n / C : 0;
}

// dx[i] = g(i, column) for every element; dbias[c] = sum over rows of dx[., c] when defined.
template <typename T, typename G>
void map_with_column_sum(int64_t n, int64_t C, T* dx, Tensor& dbias, G g) {
  std::vector<double> acc(dbias.defined() ? static_cast<size_t>(C) : 0, 0.0);
  const int64_t rows = rows_of(n, C);
  if (acc.empty()) {
    for (int64_t r = 0, i = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c, ++i) dx[i] = g(i, c);
  } else {
    // __restrict: dx (a fresh tensor at every call site) and the sums share no bytes with what g
    // reads, so the compiler vectorises each row without alias checks (30-40 % faster on VGG-16's
    // [65536, 64] rows in a micro-benchmark).
    double* __restrict a = acc.data();
    for (int64_t r = 0; r < rows; ++r) {  // each column's sum in row order, as before
      T* __restrict row = dx + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const T v = g(r * C + c, c);
        row[c] = v;
        a[c] += v;
      }
    }
    T* db = dbias.data<T>();
    for (int64_t c = 0; c < C; ++c) db[c] = static_cast<T>(acc[c]);
  }
}

// y[i] = F(x[i], bias[column]) (bias_gelu, bias_relu); y may be x.
template <class F>
void bias_map_cpu(const Tensor& x, const Tensor& bias, Tensor& y) {
  TANDEM_CPU_WIDEN_16BIT(bias_map_cpu<F>, x, bias, y);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T *xp = x.data<T>(), *bp = bias.data<T>();
    T* yp = y.data<T>();
    const int64_t C = bias.numel(), rows = rows_of(x.numel(), C);
    for (int64_t r = 0, i = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c, ++i) yp[i] = F{}(xp[i], bp[c]);
  });
}

}  // namespace

void bias_gelu_cpu(const Tensor& x, const Tensor& bias, Tensor& y) { bias_map_cpu<CpuBiasGelu>(x, bias, y); }

void bias_gelu_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Tensor& dbias) {
  TANDEM_CPU_WIDEN_16BIT(bias_gelu_backward_cpu, dy, x, bias, dx, dbias);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T *gp = dy.data<T>(), *xp = x.data<T>(), *bp = bias.data<T>();
    map_with_column_sum<T>(x.numel(), bias.numel(), dx.data<T>(), dbias,
                           [&](int64_t i, int64_t c) { return CpuBiasGeluBackward{}(gp[i], xp[i], bp[c]); });
  });
}

void bias_dropout_add_cpu(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& y, DropoutMask m) {
  TANDEM_CPU_WIDEN_16BIT(bias_dropout_add_cpu, x, bias, residual, y, m);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const fn::BiasDropoutAdd f{drop_of(m)};
    const T *xp = x.data<T>(), *bp = bias.data<T>(), *rp = residual.data<T>();
    T* yp = y.data<T>();
    const int64_t C = bias.numel(), rows = rows_of(x.numel(), C);
    for (int64_t r = 0, i = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c, ++i) yp[i] = f(xp[i], bp[c], rp[i], static_cast<uint64_t>(i));
  });
}

void dropout_bias_backward_cpu(const Tensor& dy, Tensor& dx, Tensor& dbias, DropoutMask m) {
  TANDEM_CPU_WIDEN_16BIT(dropout_bias_backward_cpu, dy, dx, dbias, m);
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] {
    const fn::MaybeDropout f = drop_of(m);
    const T* gp = dy.data<T>();
    map_with_column_sum<T>(dy.numel(), dbias.defined() ? dbias.numel() : 1, dx.data<T>(), dbias,
                           [&](int64_t i, int64_t) { return f(gp[i], static_cast<uint64_t>(i)); });
  });
}

void bias_relu_cpu(const Tensor& x, const Tensor& bias, Tensor& y) { bias_map_cpu<fn::BiasRelu>(x, bias, y); }

void relu_bias_backward_cpu(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias) {
  TANDEM_CPU_WIDEN_16BIT(relu_bias_backward_cpu, dy, y, dx, dbias);
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] {
    const T *gp = dy.data<T>(), *yp = y.data<T>();
    map_with_column_sum<T>(dy.numel(), dy.size(-1), dx.data<T>(), dbias,
                           [&](int64_t i, int64_t) { return fn::ReluBackward{}(gp[i], yp[i]); });
  });
}

}  // namespace tandem::kernels
