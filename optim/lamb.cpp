// optim/lamb.cpp: LAMB's CPU reference loops and its CUDA dispatch (see optim/lamb.h).
#include "optim/lamb.h"

#include <cmath>

#include "core/ops/common/dispatch.h"
#include "optim/kernels/lamb.h"
#include "optim/kernels/low_copy.h"

namespace tandem::optim {

namespace {
// The scalars of one step t, in the storage type.
template <typename T>
struct LambScalars {
  T beta1, beta2, keep1, keep2, eps, wd, bc1, bc2_sqrt;
  LambScalars(double b1, double b2, double e, double w, int64_t t)
      : beta1(static_cast<T>(b1)), beta2(static_cast<T>(b2)), keep1(static_cast<T>(1.0 - b1)),
        keep2(static_cast<T>(1.0 - b2)), eps(static_cast<T>(e)), wd(static_cast<T>(w)),
        bc1(static_cast<T>(1.0 - std::pow(b1, static_cast<double>(t)))),
        bc2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))))) {}
  T direction(T m, T v, T w) const { return (m / bc1) / (std::sqrt(v) / bc2_sqrt + eps) + wd * w; }
};
}  // namespace

bool LAMB::capturable() const { return !opt_.norm_reduce; }

void LAMB::update(std::vector<Slot*>& active, const Tensor& found_inf) {
  TANDEM_CHECK(!(opt_.norm_reduce && opt_.norm_reduce_device), "LAMB: both norm_reduce and norm_reduce_device are "
               "set; set one (norm_reduce_device for a captured step)");
  for (Slot* s : active) begin_step(*s);
  auto groups = launch_groups(active);
  const Device dev = active[0]->seg.param.device();
  for (Slot* s : active)
    TANDEM_CHECK(s->seg.param.device() == dev, "LAMB: all parameters must be on one device, but \"",
                 active[0]->seg.name, "\" is on ", dev.str(), " and \"", s->seg.name, "\" on ",
                 s->seg.param.device().str());
  if (dev.is_cuda()) {
    update_cuda(groups, found_inf);
  } else if (!skipped_on_cpu(found_inf)) {
    update_cpu(groups);
  }
}

void LAMB::update_cpu(std::vector<std::vector<Slot*>>& groups) {
  // Phase 1: moments, and the per-parameter sums of squares of w and u.
  std::vector<double> sums(static_cast<size_t>(2 * num_params()), 0.0);
  for (auto& group : groups)
    for (Slot* s : group) {
      const int64_t t = advance_cpu(*s);
      TANDEM_CPU_FLOAT_TYPES(s->seg.param.dtype(), T, [&] {
        const LambScalars<T> k(h_.beta1, h_.beta2, h_.eps, h_.weight_decay, t);
        const T* p = s->seg.param.data<T>();
        const T* g = s->grad.data<T>();
        T* m = s->bufs[0].data<T>();
        T* v = s->bufs[1].data<T>();
        double wsq = 0, usq = 0;
        for (int64_t i = 0; i < s->seg.param.numel(); ++i) {
          m[i] = k.beta1 * m[i] + k.keep1 * g[i];
          v[i] = k.beta2 * v[i] + k.keep2 * g[i] * g[i];
          const double u = static_cast<double>(k.direction(m[i], v[i], p[i]));
          wsq += static_cast<double>(p[i]) * static_cast<double>(p[i]);
          usq += u * u;
        }
        sums[static_cast<size_t>(2 * s->seg.param_index)] += wsq;
        sums[static_cast<size_t>(2 * s->seg.param_index + 1)] += usq;
      });
    }
  if (opt_.norm_reduce) opt_.norm_reduce(sums);
  if (opt_.norm_reduce_device) {  // the captured-step hook on the CPU: an f64 tensor (optim/optimizer.h)
    Tensor t = Tensor::from_vector_f64(sums, {static_cast<int64_t>(sums.size())}, DType::F64);
    opt_.norm_reduce_device(t);
    TANDEM_CHECK(t.numel() == static_cast<int64_t>(sums.size()) && t.dtype() == DType::F64 && !t.is_cuda(),
                 "LAMB: norm_reduce_device must keep the sums tensor's shape, dtype and device");
    sums = t.to_vector_f64();
  }
  // Phase 2: u again from the stored moments (bit-identical to phase 1), scaled by the trust ratio.
  for (auto& group : groups)
    for (Slot* s : group)
      TANDEM_CPU_FLOAT_TYPES(s->seg.param.dtype(), T, [&] {
        // The count phase 1 advanced, read in place (count_of's item() would be a cast the GPU never runs).
        const LambScalars<T> k(h_.beta1, h_.beta2, h_.eps, h_.weight_decay,
                               static_cast<int64_t>(*s->step.data<float>()));
        const double wn = std::sqrt(sums[static_cast<size_t>(2 * s->seg.param_index)]);
        const double un = std::sqrt(sums[static_cast<size_t>(2 * s->seg.param_index + 1)]);
        const T step = static_cast<T>(lr() * (wn > 0 && un > 0 ? wn / un : 1.0));
        T* p = s->seg.param.data<T>();
        const T* m = s->bufs[0].data<T>();
        const T* v = s->bufs[1].data<T>();
        const kernels::LowWriter low(s->seg.low);
        for (int64_t i = 0; i < s->seg.param.numel(); ++i) {
          p[i] -= step * k.direction(m[i], v[i], p[i]);
          low.put(i, p[i]);
        }
      });
}

void LAMB::update_cuda(std::vector<std::vector<Slot*>>& groups, const Tensor& found_inf) {
#ifdef TANDEM_WITH_CUDA
  const Device dev = groups[0][0]->seg.param.device();
  // Allocated per step: inside a capture it is graph memory, and it dies within the step.
  Tensor sums = Tensor::zeros({2 * num_params()}, DType::F32, dev);
  const kernels::AdamConst k = device_const();
  const float* flag = flag_ptr(found_inf);
  std::vector<std::vector<kernels::AdamTensor>> ts;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    ts.push_back(device_tensors(groups[gi]));
    kernels::lamb_phase1_cuda(group_state(gi), groups[gi][0]->seg.param.dtype(), dev.index, ts[gi], k, lr(), flag,
                              sums.data<float>());  // phase 1 changes no weight: no low copy
  }
  if (opt_.norm_reduce) {
    const std::vector<float> local = sums.to_vector();  // the one host round trip, only with a host hook
    std::vector<double> all(local.begin(), local.end());
    opt_.norm_reduce(all);
    sums = Tensor::from_vector(std::vector<float>(all.begin(), all.end()), {2 * num_params()}, DType::F32, dev);
  }
  if (opt_.norm_reduce_device) {
    opt_.norm_reduce_device(sums);
    TANDEM_CHECK(sums.numel() == 2 * num_params() && sums.dtype() == DType::F32 && sums.device() == dev,
                 "LAMB: norm_reduce_device must keep the sums tensor's shape, dtype and device");
  }
  for (size_t gi = 0; gi < groups.size(); ++gi)
    kernels::lamb_phase2_cuda(group_state(gi), groups[gi][0]->seg.param.dtype(), dev.index, ts[gi], k, lr(), flag,
                              sums.data<float>(), kernels::low_kind(groups[gi][0]->seg.low));
#else
  (void)groups;
  (void)found_inf;
  TANDEM_THROW("LAMB: CUDA parameters in a CPU-only build");
#endif
}

}  // namespace tandem::optim
