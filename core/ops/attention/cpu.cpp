// core/ops/attention/cpu.cpp: the scale-mask-softmax(-dropout) reference on the CPU
// (semantics in core/ops/attention/kernels.h). Row statistics are accumulated in double whatever
// T is: the CPU is what the parity tests trust.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/dropout/functors.h"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {

void scale_mask_softmax_fwd_cpu(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                Tensor& out) {
  TANDEM_CPU_WIDEN_16BIT(scale_mask_softmax_fwd_cpu, x, mask, a, probs, out);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = x.data<T>();
    T* pp = probs.data<T>();
    T* po = out.data<T>();
    const int32_t* pm = mask.defined() ? mask.data<int32_t>() : nullptr;
    const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
    std::vector<double> z(static_cast<size_t>(a.cols));
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* row = px + r * a.cols;
      const int32_t* mrow = pm ? pm + (r / a.rows_per_batch) * a.cols : nullptr;
      double m = -INFINITY;
      for (int64_t j = 0; j < a.cols; ++j) {
        z[j] = (mrow && mrow[j] == 0) ? static_cast<double>(kMaskedScore) : a.scale * static_cast<double>(row[j]);
        m = std::max(m, z[j]);
      }
      double s = 0;
      for (int64_t j = 0; j < a.cols; ++j) s += (z[j] = std::exp(z[j] - m));
      for (int64_t j = 0; j < a.cols; ++j) {
        const int64_t i = r * a.cols + j;
        pp[i] = static_cast<T>(z[j] / s);
        if (a.dropout) po[i] = drop(pp[i], static_cast<uint64_t>(i));
      }
    }
    if (!a.dropout && po != pp) std::copy(pp, pp + a.rows * a.cols, po);
  });
}

void scale_mask_softmax_bwd_cpu(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                Tensor& dx) {
  TANDEM_CPU_WIDEN_16BIT(scale_mask_softmax_bwd_cpu, probs, dy, mask, a, dx);
  TANDEM_CPU_FLOAT_TYPES(probs.dtype(), T, [&] {
    const T* pp = probs.data<T>();
    const T* pg = dy.data<T>();
    T* pd = dx.data<T>();
    const int32_t* pm = mask.defined() ? mask.data<int32_t>() : nullptr;
    const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
    std::vector<double> g(static_cast<size_t>(a.cols));
    for (int64_t r = 0; r < a.rows; ++r) {
      const int64_t base = r * a.cols;
      const int32_t* mrow = pm ? pm + (r / a.rows_per_batch) * a.cols : nullptr;
      double dot = 0;
      for (int64_t j = 0; j < a.cols; ++j) {
        g[j] = a.dropout ? static_cast<double>(drop(pg[base + j], static_cast<uint64_t>(base + j)))
                         : static_cast<double>(pg[base + j]);
        dot += g[j] * static_cast<double>(pp[base + j]);
      }
      for (int64_t j = 0; j < a.cols; ++j) {
        const bool masked = mrow && mrow[j] == 0;
        pd[base + j] = masked ? T(0) : static_cast<T>(a.scale * static_cast<double>(pp[base + j]) * (g[j] - dot));
      }
    }
  });
}

}  // namespace tandem::kernels
