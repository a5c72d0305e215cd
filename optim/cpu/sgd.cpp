// optim/cpu/sgd.cpp: the CPU reference SGD update, a plain loop per tensor (see optim/sgd.h for the math).
#include "core/ops/common/dispatch.h"
#include "optim/kernels/sgd.h"

namespace tandem::optim::kernels {

void sgd_step_cpu(Tensor& param, const Tensor& grad, Tensor& buf_t, bool first, const SGDOptions& opt,
                  const Tensor& low_t) {
  const LowWriter low(low_t);
  TANDEM_CPU_FLOAT_TYPES(param.dtype(), T, [&] {
    T* p = param.data<T>();
    const T* gr = grad.data<T>();
    T* buf = opt.momentum != 0 ? buf_t.data<T>() : nullptr;
    const T lr = static_cast<T>(opt.lr), wd = static_cast<T>(opt.weight_decay);
    const T mom = static_cast<T>(opt.momentum), damp = static_cast<T>(1.0 - opt.dampening);
    const int64_t n = param.numel();
    for (int64_t i = 0; i < n; ++i) {
      T d = gr[i] + wd * p[i];
      if (buf) {
        T b = first ? d : mom * buf[i] + damp * d;
        buf[i] = b;
        d = opt.nesterov ? d + mom * b : b;
      }
      p[i] -= lr * d;
      low.put(i, p[i]);
    }
  });
}

}  // namespace tandem::optim::kernels
