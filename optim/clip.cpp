// optim/clip.cpp: gradient-norm clipping (see optim/clip.h).
#include "optim/clip.h"

#include <cmath>

#include "core/ops/dispatch.h"
#include "core/profile.h"
#include "optim/kernels/clip.h"

namespace tandem::optim {

namespace {
// Calls f(dtype, device, tensors) once per (device, dtype) group of the defined tensors.
template <typename F>
void for_each_group(const std::vector<Tensor>& grads, F&& f) {
  std::vector<bool> done(grads.size(), false);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (done[i] || !grads[i].defined()) continue;
    std::vector<Tensor> group;
    for (size_t j = i; j < grads.size(); ++j) {
      if (done[j] || !grads[j].defined() || grads[j].dtype() != grads[i].dtype() ||
          grads[j].device() != grads[i].device())
        continue;
      done[j] = true;
      group.push_back(grads[j]);
    }
    f(grads[i].dtype(), grads[i].device(), group);
  }
}

#ifdef TANDEM_WITH_CUDA
std::vector<kernels::GradTensor> refs(const std::vector<Tensor>& ts) {
  std::vector<kernels::GradTensor> out;
  for (const auto& t : ts) out.push_back({t.data_ptr(), t.numel()});
  return out;
}
#endif
}  // namespace

double grad_norm(const std::vector<Tensor>& grads, const SumSquaresReduce& reduce) {
  double sq = 0;
  for_each_group(grads, [&](DType dt, Device dev, const std::vector<Tensor>& group) {
    if (dev.is_cuda()) {
#ifdef TANDEM_WITH_CUDA
      sq += kernels::sum_squares_cuda(dt, dev.index, refs(group));
#endif
      return;
    }
    TANDEM_CPU_FLOAT_TYPES(dt, T, [&] {
      for (const auto& g : group) {
        const T* x = g.data<T>();
        for (int64_t i = 0; i < g.numel(); ++i) sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      }
    });
  });
  if (reduce) {
    std::vector<double> v{sq};
    reduce(v);
    TANDEM_CHECK(v.size() == 1, "grad_norm: the reduce hook must keep the vector's length (1), got ", v.size());
    sq = v[0];
  }
  return std::sqrt(sq);
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const SumSquaresReduce& reduce) {
  profile::Range range("clip_grad_norm");
  TANDEM_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm,
               " (leave --clip-grad-norm unset to disable clipping)");
  const double total = grad_norm(grads, reduce);
  const double scale = max_norm / (total + 1e-6);
  if (!std::isfinite(total) || !(scale < 1.0)) return total;  // inf/NaN: see the header
  for_each_group(grads, [&](DType dt, Device dev, const std::vector<Tensor>& group) {
    if (dev.is_cuda()) {
#ifdef TANDEM_WITH_CUDA
      kernels::scale_cuda(dt, dev.index, refs(group), static_cast<float>(scale));
#endif
      return;
    }
    TANDEM_CPU_FLOAT_TYPES(dt, T, [&] {
      const T s = static_cast<T>(scale);
      for (const auto& g : group) {
        T* x = g.data<T>();
        for (int64_t i = 0; i < g.numel(); ++i) x[i] *= s;
      }
    });
  });
  return total;
}

double clip_grad_norm(const Optimizer& opt, double max_norm, const SumSquaresReduce& reduce) {
  return clip_grad_norm(opt.grads(), max_norm, reduce);
}

}  // namespace tandem::optim
