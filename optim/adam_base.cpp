// optim/adam_base.cpp: see optim/adam_base.h.
#include "optim/adam_base.h"

#include <cmath>

#include "core/check.h"
#include "optim/kernels/low_copy.h"

namespace tandem::optim {

namespace {
struct Resolved {
  double lr;
  double weight_decay, beta1, beta2, eps;
};

Resolved resolve(const OptimizerOptions& o, const char* who, double default_wd, double default_eps) {
  // lr 1e-3: torch.optim.AdamW's and apex FusedLAMB's default.
  Resolved r{o.lr.value_or(1e-3), o.weight_decay.value_or(default_wd), o.beta1, o.beta2, o.eps.value_or(default_eps)};
  TANDEM_CHECK(r.lr >= 0, who, ": lr must be >= 0, got ", r.lr);
  TANDEM_CHECK(r.weight_decay >= 0, who, ": weight_decay must be >= 0, got ", r.weight_decay);
  TANDEM_CHECK(r.beta1 >= 0 && r.beta1 < 1 && r.beta2 >= 0 && r.beta2 < 1, who, ": betas must lie in [0, 1), got (",
               r.beta1, ", ", r.beta2, ")");
  TANDEM_CHECK(r.eps >= 0, who, ": eps must be >= 0, got ", r.eps);
  TANDEM_CHECK(o.momentum == 0 && o.dampening == 0 && !o.nesterov, who,
               " takes no momentum, dampening or nesterov (those are SGD's); use betas instead");
  return r;
}
}  // namespace

AdamBase::AdamBase(NamedTensors named_params, const OptimizerOptions& opt, AdamDefaults d)
    : Optimizer(std::move(named_params), resolve(opt, d.name, d.weight_decay, d.eps).lr), opt_(opt) {
  const Resolved r = resolve(opt, d.name, d.weight_decay, d.eps);
  h_ = {r.weight_decay, r.beta1, r.beta2, r.eps};
}

AdamBase::AdamBase(std::vector<ParamSegment> segments, int64_t num_params, const OptimizerOptions& opt, AdamDefaults d)
    : Optimizer(std::move(segments), num_params, resolve(opt, d.name, d.weight_decay, d.eps).lr), opt_(opt) {
  const Resolved r = resolve(opt, d.name, d.weight_decay, d.eps);
  h_ = {r.weight_decay, r.beta1, r.beta2, r.eps};
}

void AdamBase::begin_step(Slot& s) {
  if (s.bufs.size() != 2 || !s.bufs[0].defined() || !s.bufs[1].defined()) {
    const Tensor& p = s.seg.param;
    s.bufs = {Tensor::zeros(p.shape(), p.dtype(), p.device()), Tensor::zeros(p.shape(), p.dtype(), p.device())};
  }
}

int64_t AdamBase::advance_cpu(Slot& s) {
  float& count = *s.step.data<float>();
  count += 1.0f;
  return static_cast<int64_t>(count);
}

std::vector<std::vector<Optimizer::Slot*>> AdamBase::launch_groups(const std::vector<Slot*>& active) {
  std::vector<std::vector<Slot*>> groups;
  for (Slot* s : active) {
    const Tensor& p = s->seg.param;
    bool placed = false;
    for (auto& g : groups) {
      const Tensor& q = g[0]->seg.param;
      if (q.dtype() == p.dtype() && q.device() == p.device() &&
          kernels::low_kind(g[0]->seg.low) == kernels::low_kind(s->seg.low)) {
        g.push_back(s);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({s});
  }
  return groups;
}

kernels::AdamConst AdamBase::device_const() const {
  kernels::AdamConst k{};
  k.beta1 = static_cast<float>(h_.beta1);
  k.beta2 = static_cast<float>(h_.beta2);
  k.eps = static_cast<float>(h_.eps);
  k.weight_decay = static_cast<float>(h_.weight_decay);
  k.one_minus_beta1 = static_cast<float>(1.0 - h_.beta1);
  k.one_minus_beta2 = static_cast<float>(1.0 - h_.beta2);
  k.beta1_f64 = h_.beta1;
  k.beta2_f64 = h_.beta2;
  k.weight_decay_f64 = h_.weight_decay;
  return k;
}

std::vector<kernels::AdamTensor> AdamBase::device_tensors(const std::vector<Slot*>& group) {
  std::vector<kernels::AdamTensor> ts;
  for (Slot* s : group)
    ts.push_back({s->seg.param.data_ptr(), s->grad.data_ptr(), s->bufs[0].data_ptr(), s->bufs[1].data_ptr(),
                  s->step.data<float>(), s->seg.param.numel(), s->seg.param_index,
                  s->seg.low.defined() ? s->seg.low.data_ptr() : nullptr});
  return ts;
}

std::shared_ptr<kernels::AdamCudaGroup>& AdamBase::group_state(size_t group) {
  if (groups_.size() <= group) groups_.resize(group + 1);
  return groups_[group];
}

void AdamBase::lr_changed() {
#ifdef TANDEM_WITH_CUDA
  for (const auto& g : groups_) kernels::adam_set_lr_cuda(g, lr());
#endif
}

}  // namespace tandem::optim
