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

void SGD::update(std::vector<Slot*>& active, const Tensor& found_inf) {
  std::vector<Slot*> gpu;
  for (Slot* s : active) {
    if (s->seg.param.is_cuda()) {
      gpu.push_back(s);
    } else if (!skipped_on_cpu(found_inf)) {
      step_cpu(*s);
    }
  }
  if (!gpu.empty()) step_cuda(gpu, found_inf);
}

void SGD::lr_changed() {
#ifdef TANDEM_WITH_CUDA
  for (const auto& t : cuda_tables_) kernels::sgd_set_lr_cuda(t, lr());
#endif
}

void SGD::step_cpu(Slot& s) {
  Tensor param = s.seg.param;  // a handle: the kernel writes through it into the parameter
  Tensor buf;
  bool first = false;
  if (opt_.momentum != 0) {
    if (s.bufs.empty() || !s.bufs[0].defined()) s.bufs = {Tensor::empty_like(param)};
    buf = s.bufs[0];
    float& count = *s.step.data<float>();  // the same count the CUDA kernel reads (see optim/sgd.h)
    first = count == 0.0f;
    count += 1.0f;
  }
  kernels::sgd_step_cpu(param, s.grad, buf, first, options(), s.seg.low);
}

void SGD::step_cuda(std::vector<Slot*>& slots, const Tensor& found_inf) {
#ifdef TANDEM_WITH_CUDA
  // One launch per (device, dtype, low copy's dtype) group: a model on one GPU in one dtype is
  // exactly one launch (under AMP two: the 16-bit parameters' masters, and BatchNorm's f32).
  std::vector<bool> done(slots.size(), false);
  size_t group = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (done[i]) continue;
    const DType dt = slots[i]->seg.param.dtype();
    const Device dev = slots[i]->seg.param.device();
    const kernels::LowKind low = kernels::low_kind(slots[i]->seg.low);
    std::vector<kernels::SgdTensor> tensors;
    for (size_t j = i; j < slots.size(); ++j) {
      Slot& s = *slots[j];
      const Tensor& p = s.seg.param;
      if (done[j] || p.dtype() != dt || p.device() != dev || kernels::low_kind(s.seg.low) != low) continue;
      done[j] = true;
      const bool mom = opt_.momentum != 0;
      // Uninitialised: the kernel writes it whole at the buffer's first update (count 0).
      if (mom && (s.bufs.empty() || !s.bufs[0].defined())) s.bufs = {Tensor::empty_like(p)};
      tensors.push_back({p.data_ptr(), s.grad.data_ptr(), mom ? s.bufs[0].data_ptr() : nullptr,
                         mom ? s.step.data<float>() : nullptr, p.numel(),
                         s.seg.low.defined() ? s.seg.low.data_ptr() : nullptr});
    }
    if (cuda_tables_.size() <= group) cuda_tables_.resize(group + 1);
    kernels::sgd_step_cuda(cuda_tables_[group++], dt, dev.index, tensors, options(), flag_ptr(found_inf), low);
  }
#else
  (void)slots;
  (void)found_inf;
  TANDEM_THROW("SGD: CUDA parameters in a CPU-only build");
#endif
}

}  // namespace tandem::optim
