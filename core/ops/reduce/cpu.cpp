// core/ops/reduce/cpu.cpp: sum to a scalar and its broadcast backward on the CPU (the reference).
// Accumulates in double for f32 and f64 alike: the reference should be the most accurate path.
#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/reduce/kernels.h"

namespace tandem::kernels {

void sum_cpu(const Tensor& x, double scale, Tensor& out) {
  TANDEM_CPU_WIDEN_16BIT(sum_cpu, x, scale, out);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* p = x.data<T>();
    double acc = 0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) acc += p[i];
    out.data<T>()[0] = static_cast<T>(acc * scale);
  });
}

void broadcast_scalar_cpu(const Tensor& g, double scale, Tensor& dx) {
  TANDEM_CPU_WIDEN_16BIT(broadcast_scalar_cpu, g, scale, dx);
  TANDEM_CPU_FLOAT_TYPES(dx.dtype(), T, [&] {
    T v = static_cast<T>(static_cast<double>(g.data<T>()[0]) * scale);
    T* p = dx.data<T>();
    for (int64_t i = 0, n = dx.numel(); i < n; ++i) p[i] = v;
  });
}

}  // namespace tandem::kernels
