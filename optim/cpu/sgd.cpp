// optim/cpu/sgd.cpp: the CPU reference SGD update, a plain loop per tensor (see optim/sgd.h for the math).
// A tensor of at least cpu_parallel::kParallelMin values is split into blocks of elements between
// OpenMP's threads (core/ops/common/cpu/parallel.h; -fopenmp from optim/CMakeLists.txt): every
// element is updated alone, so the bits do not depend on the thread count.
#include "core/ops/common/cpu/parallel.h"
#include "core/ops/common/dispatch.h"
#include "optim/kernels/sgd.h"

namespace tandem::optim::kernels {

namespace cpu_parallel = tandem::kernels::cpu_parallel;

namespace {

// One variant of the update, with momentum, first step and Nesterov fixed at compile time: the loop
// then has no branch and its pointers are restrict (param, grad and buffer never overlap), so the
// compiler vectorises it. It was a scalar loop (control flow in the loop), 7 % of VGG-16's CPU step
// (perf, 1 thread). Each element's expression is the one it always was, and vector multiply, add
// and subtract round as the scalar ones do: the same bits.
template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
void update(T* __restrict p, const T* __restrict gr, T* __restrict buf, int64_t n, T lr, T wd, T mom, T damp) {
  for (int64_t i = 0; i < n; ++i) {
    T d = gr[i] + wd * p[i];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = kNesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

}  // namespace

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
    // Blocks of 16 elements (64 bytes of f32): no two threads write one cache line.
    auto run = [&](auto* kernel) {
      cpu_parallel::for_blocks(n, 16, cpu_parallel::threads_for(n), [&](int64_t b, int64_t e) {
        kernel(p + b, gr + b, buf ? buf + b : nullptr, e - b, lr, wd, mom, damp);
      });
    };
    if (!buf) run(&update<T, false, false, false>);
    else if (first && opt.nesterov) run(&update<T, true, true, true>);
    else if (first) run(&update<T, true, true, false>);
    else if (opt.nesterov) run(&update<T, true, false, true>);
    else run(&update<T, true, false, false>);
    if (low.kind != LowKind::None)  // the 16-bit working copy (AMP), in its own pass
      for (int64_t i = 0; i < n; ++i) low.put(i, p[i]);
  });
}

}  // namespace tandem::optim::kernels
