// optim/sgd.cpp: SGD bookkeeping and backend dispatch (see optim/sgd.h for the math; the updates
// themselves are optim/cpu/sgd.cpp and optim/cuda/sgd.cu).
#include "optim/sgd.h"

#include "core/profile.h"
#include "optim/kernels/sgd.h"

namespace tandem::optim {

SGD::SGD(std::vector<std::pair<std::string, Tensor>> named_params, SGDOptions opt) : opt_(opt) {
  TANDEM_CHECK(opt.lr >= 0, "SGD: lr must be >= 0, got ", opt.lr);
  TANDEM_CHECK(opt.momentum >= 0, "SGD: momentum must be >= 0, got ", opt.momentum);
  TANDEM_CHECK(opt.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  TANDEM_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
               "SGD: nesterov needs momentum > 0 and dampening == 0 (PyTorch's rule)");
  for (auto& [name, p] : named_params) {
    TANDEM_CHECK(p.defined() && is_floating(p.dtype()), "SGD: parameter \"", name, "\" is not a floating tensor");
    for (const auto& s : slots_)
      TANDEM_CHECK(s.name != name, "SGD: two parameters are both named \"", name, "\"");
    slots_.push_back({name, p, Tensor()});
  }
}

static std::vector<std::pair<std::string, Tensor>> number(const std::vector<Tensor>& params) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}

SGD::SGD(const std::vector<Tensor>& params, SGDOptions opt) : SGD(number(params), opt) {}

void SGD::step_cpu(Slot& s) {
  const Tensor g = s.param.grad();
  const bool first = !s.buf.defined();
  if (opt_.momentum != 0 && first) s.buf = Tensor::empty_like(s.param);
  kernels::sgd_step_cpu(s.param, g, s.buf, first, opt_);
}

void SGD::step() {
  profile::Range range("optimizer.step");
  std::vector<Slot*> gpu;
  for (auto& s : slots_) {
    Tensor g = s.param.grad();
    if (!g.defined()) continue;  // unused this step (PyTorch skips p.grad is None)
    TANDEM_CHECK(g.shape() == s.param.shape() && g.dtype() == s.param.dtype() && g.device() == s.param.device(),
                 "SGD: gradient ", g.str(), " of \"", s.name, "\" does not match its parameter ", s.param.str());
    if (s.buf.defined() && s.buf.device() != s.param.device()) s.buf = s.buf.to(s.param.device());
    if (s.param.is_cuda()) {
      gpu.push_back(&s);
    } else {
      step_cpu(s);
    }
  }
  if (!gpu.empty()) step_cuda(gpu);
  ++steps_;
}

void SGD::step_cuda(std::vector<Slot*>& slots) {
#ifdef TANDEM_WITH_CUDA
  // One launch per (device, dtype) group: a model on one GPU in one dtype is exactly one launch.
  std::vector<bool> done(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (done[i]) continue;
    const DType dt = slots[i]->param.dtype();
    const Device dev = slots[i]->param.device();
    std::vector<kernels::SgdTensor> group;
    for (size_t j = i; j < slots.size(); ++j) {
      Slot& s = *slots[j];
      if (done[j] || s.param.dtype() != dt || s.param.device() != dev) continue;
      done[j] = true;
      const bool first = !s.buf.defined();
      if (opt_.momentum != 0 && first) s.buf = Tensor::empty_like(s.param);
      group.push_back({s.param.data_ptr(), s.param.grad().data_ptr(),
                       opt_.momentum != 0 ? s.buf.data_ptr() : nullptr, s.param.numel(), first});
    }
    kernels::sgd_step_cuda(cuda_table_, dt, dev.index, group, opt_);
  }
#else
  TANDEM_THROW("SGD: CUDA parameters in a CPU-only build");
#endif
}

void SGD::zero_grad() {
  for (auto& s : slots_) {
    Tensor g = s.param.grad();
    if (g.defined()) g.zero_();
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& s : slots_)
    if (s.buf.defined()) out.emplace_back(s.name + ".momentum_buffer", s.buf);
  return out;
}

void SGD::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  for (auto& s : slots_) s.buf = Tensor();
  for (const auto& [key, t] : state) {
    const std::string suffix = ".momentum_buffer";
    TANDEM_CHECK(key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0,
                 "SGD::load_state: unexpected key \"", key, "\" (expected \"<param name>.momentum_buffer\")");
    const std::string name = key.substr(0, key.size() - suffix.size());
    Slot* slot = nullptr;
    for (auto& s : slots_)
      if (s.name == name) slot = &s;
    TANDEM_CHECK(slot != nullptr, "SGD::load_state: no parameter named \"", name,
                 "\"; was the checkpoint written for another model?");
    TANDEM_CHECK(t.numel() == slot->param.numel(), "SGD::load_state: \"", key, "\" has ", t.str(),
                 " but the parameter is ", slot->param.str());
    Tensor buf = Tensor::empty_like(slot->param);
    Tensor src = t.dtype() == buf.dtype() ? t : t.detach().to(buf.dtype());
    buf.copy_(src.view(buf.shape()));
    slot->buf = buf;
  }
}

}  // namespace tandem::optim
