// core/ops/cpu/dropout.cpp: CPU dropout over the shared mask rule (core/ops/dropout_functors.h).
#include "core/ops/dispatch.h"
#include "core/ops/cpu/widen.h"
#include "core/ops/dropout_functors.h"
#include "core/ops/kernels/dropout.h"

namespace tandem::kernels {

void dropout_apply_cpu(const Tensor& src, Tensor& dst, float p, uint64_t seed, uint64_t offset) {
  TANDEM_CPU_WIDEN_16BIT(dropout_apply_cpu, src, dst, p, seed, offset);
  TANDEM_CPU_FLOAT_TYPES(src.dtype(), T, [&] {
    const fn::Dropout f{p, seed, offset};
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    const int64_t n = src.numel();
    for (int64_t i = 0; i < n; ++i) d[i] = f(s[i], static_cast<uint64_t>(i));
  });
}

}  // namespace tandem::kernels
