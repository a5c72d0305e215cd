// optim/sgd.cpp: SGD bookkeeping and backend dispatch (see optim/sgd.h for the math; the updates
// themselves are optim/cpu/sgd.cpp and optim/cuda/sgd.cu).
#include "optim/sgd.h"

#include "optim/kernels/sgd.h"

namespace tandem::optim {

namespace {
const SGDOptions& checked(const SGDOptions& opt) {
  TANDEM_CHECK(opt.lr >= 0, "SGD: lr must be >= 0, got ", opt.lr);
  TANDEM_CHECK(opt.momentum >= 0, "SGD: momentum must be >= 0, got ", opt.momentum);
  TANDEM_CHECK(opt.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  TANDEM_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
               "SGD: nesterov needs momentum > 0 and dampening == 0 (PyTorch's rule)");
  return opt;
}

NamedTensors number(const std::vector<Tensor>& params) {
  NamedTensors out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}
}  // namespace

SGD::SGD(NamedTensors named_params, SGDOptions opt)
    : Optimizer(std::move(named_params), checked(opt).lr), opt_(opt) {}

SGD::SGD(const std::vector<Tensor>& params, SGDOptions opt) : SGD(number(params), opt) {}

SGD::SGD(std::vector<ParamSegment> segments, int64_t num_params, SGDOptions opt)
    : Optimizer(std::move(segments), num_params, checked(opt).lr), opt_(opt) {}

SGD::~SGD() = default;

SGDOptions SGD::options() const {
  SGDOptions o = opt_;
  o.lr = lr();
  return o;
}

void SGD::update(std::vector<Slot*>& active) {
  std::vector<Slot*> gpu;
  for (Slot* s : active) {
    if (s->seg.param.is_cuda()) {
      gpu.push_back(s);
    } else {
      step_cpu(*s);
    }
  }
  if (!gpu.empty()) step_cuda(gpu);
}

void SGD::lr_changed() {
#ifdef TANDEM_WITH_CUDA
  kernels::sgd_set_lr_cuda(cuda_table_, static_cast<float>(lr()));
#endif
}

void SGD::step_cpu(Slot& s) {
  Tensor param = s.seg.param;  // a handle: the kernel writes through it into the parameter
  const bool first = s.bufs.empty() || !s.bufs[0].defined();
  if (opt_.momentum != 0 && first) s.bufs = {Tensor::empty_like(param)};
  Tensor buf = s.bufs.empty() ? Tensor() : s.bufs[0];
  kernels::sgd_step_cpu(param, s.grad, buf, first, options());
}

void SGD::step_cuda(std::vector<Slot*>& slots) {
#ifdef TANDEM_WITH_CUDA
  // One launch per (device, dtype) group: a model on one GPU in one dtype is exactly one launch.
  std::vector<bool> done(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (done[i]) continue;
    const DType dt = slots[i]->seg.param.dtype();
    const Device dev = slots[i]->seg.param.device();
    std::vector<kernels::SgdTensor> group;
    for (size_t j = i; j < slots.size(); ++j) {
      Slot& s = *slots[j];
      const Tensor& p = s.seg.param;
      if (done[j] || p.dtype() != dt || p.device() != dev) continue;
      done[j] = true;
      const bool first = s.bufs.empty() || !s.bufs[0].defined();
      if (opt_.momentum != 0 && first) s.bufs = {Tensor::empty_like(p)};
      group.push_back({p.data_ptr(), s.grad.data_ptr(), opt_.momentum != 0 ? s.bufs[0].data_ptr() : nullptr,
                       p.numel(), first});
    }
    kernels::sgd_step_cuda(cuda_table_, dt, dev.index, group, options());
  }
#else
  (void)slots;
  TANDEM_THROW("SGD: CUDA parameters in a CPU-only build");
#endif
}

}  // namespace tandem::optim
