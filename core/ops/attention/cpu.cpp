// core/ops/attention/cpu.cpp: scale-mask-softmax(-dropout) on the CPU (semantics in
// core/ops/attention/kernels.h), in two forms:
//   - f64 (the gradient checks): statistics, exp and the backward's products in double, libm's exp;
//   - f32 (training, and 16-bit tensors widened to f32): the exponentials in f32 through
//     f32_math::exp_nonpositive in loops GCC vectorises (libm's double exp, one call per score, was
//     ~5 % of bert_small's CPU step), row sums and the backward's dot product and products still in
//     double. Within a few f32 ulps of the f64 form (tests/test_attention_cpu_f32.cpp), which is
//     what the CUDA kernel's f32 statistics are compared against in the parity tests.
// Both keep the contract's exact zeros: a masked key (score -FLT_MAX) gets probability 0 whenever
// its row keeps a key, and gradient 0.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/f32_math.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/dropout/functors.h"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {
namespace {

const int32_t* mask_row(const int32_t* pm, const SoftmaxArgs& a, int64_t r) {
  return pm ? pm + (r / a.rows_per_batch) * a.cols : nullptr;
}

// Sum of n floats in double, in four interleaved partial sums so that the adds do not wait on
// each other (and vectorise); the order is fixed, so the result is deterministic.
double sum_f64(const float* __restrict v, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(v[j + k]);
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; j < n; ++j) s += static_cast<double>(v[j]);
  return s;
}

// sum_j g_j p_j in double (each product is exact in double), the same four partial sums.
double dot_f64(const float* __restrict g, const float* __restrict p, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(g[j + k]) * static_cast<double>(p[j + k]);
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; j < n; ++j) s += static_cast<double>(g[j]) * static_cast<double>(p[j]);
  return s;
}

void forward(const double* px, const int32_t* pm, const SoftmaxArgs& a, double* pp, double* po) {
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  std::vector<double> z(static_cast<size_t>(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    const double* row = px + r * a.cols;
    const int32_t* mrow = mask_row(pm, a, r);
    double m = -INFINITY;
    for (int64_t j = 0; j < a.cols; ++j) {
      z[j] = (mrow && mrow[j] == 0) ? static_cast<double>(kMaskedScore) : a.scale * row[j];
      m = std::max(m, z[j]);
    }
    double s = 0;
    for (int64_t j = 0; j < a.cols; ++j) s += (z[j] = std::exp(z[j] - m));
    for (int64_t j = 0; j < a.cols; ++j) {
      const int64_t i = r * a.cols + j;
      pp[i] = z[j] / s;
      if (a.dropout) po[i] = drop(pp[i], static_cast<uint64_t>(i));
    }
  }
}

void forward(const float* px, const int32_t* pm, const SoftmaxArgs& a, float* pp, float* po) {
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  const int64_t n = a.cols;
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* row = px + r * n;
    const int32_t* mrow = mask_row(pm, a, r);
    float* __restrict z = pp + r * n;  // the scores, then e^(z - max), then p, in place
    for (int64_t j = 0; j < n; ++j) z[j] = a.scale * row[j];
    if (mrow)
      for (int64_t j = 0; j < n; ++j) z[j] = mrow[j] == 0 ? kMaskedScore : z[j];
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, z[j]);
    for (int64_t j = 0; j < n; ++j) z[j] = f32_math::exp_nonpositive(z[j] - m);
    const float inv = static_cast<float>(1.0 / sum_f64(z, n));
    for (int64_t j = 0; j < n; ++j) z[j] *= inv;
    if (a.dropout)
      for (int64_t j = 0; j < n; ++j) po[r * n + j] = drop(z[j], static_cast<uint64_t>(r * n + j));
  }
}

// dx_j = masked_j ? 0 : scale * p_j * (g_j - sum_k g_k p_k), g = dy through the dropout mask.
template <typename T>
void bwd(const T* pp, const T* pg, const int32_t* pm, const SoftmaxArgs& a, T* pd) {
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  const int64_t n = a.cols;
  std::vector<T> gbuf(static_cast<size_t>(n));
  T* __restrict g = gbuf.data();
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * n;
    const int32_t* mrow = mask_row(pm, a, r);
    const T* __restrict p = pp + base;
    if (a.dropout)
      for (int64_t j = 0; j < n; ++j) g[j] = drop(pg[base + j], static_cast<uint64_t>(base + j));
    else
      std::copy(pg + base, pg + base + n, g);
    double dot = 0;
    if constexpr (std::is_same_v<T, float>) {
      dot = dot_f64(g, p, n);
    } else {
      for (int64_t j = 0; j < n; ++j) dot += g[j] * p[j];
    }
    T* __restrict d = pd + base;
    for (int64_t j = 0; j < n; ++j)
      d[j] = static_cast<T>(a.scale * static_cast<double>(p[j]) * (static_cast<double>(g[j]) - dot));
    if (mrow)
      for (int64_t j = 0; j < n; ++j) d[j] = mrow[j] == 0 ? T(0) : d[j];
  }
}

}  // namespace

void scale_mask_softmax_fwd_cpu(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                Tensor& out) {
  TANDEM_CPU_WIDEN_16BIT(scale_mask_softmax_fwd_cpu, x, mask, a, probs, out);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const int32_t* pm = mask.defined() ? mask.data<int32_t>() : nullptr;
    T* pp = probs.data<T>();
    T* po = out.data<T>();
    forward(x.data<T>(), pm, a, pp, po);  // the f32 or the f64 form, by overload
    if (!a.dropout && po != pp) std::copy(pp, pp + a.rows * a.cols, po);
  });
}

void scale_mask_softmax_bwd_cpu(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                Tensor& dx) {
  TANDEM_CPU_WIDEN_16BIT(scale_mask_softmax_bwd_cpu, probs, dy, mask, a, dx);
  TANDEM_CPU_FLOAT_TYPES(probs.dtype(), T, [&] {
    bwd<T>(probs.data<T>(), dy.data<T>(), mask.defined() ? mask.data<int32_t>() : nullptr, a, dx.data<T>());
  });
}

}  // namespace tandem::kernels
