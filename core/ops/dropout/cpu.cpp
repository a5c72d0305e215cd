// core/ops/dropout/cpu.cpp: CPU dropout over the shared mask rule (core/ops/dropout/functors.h).
#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/dropout/functors.h"
#include "core/ops/dropout/kernels.h"

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
