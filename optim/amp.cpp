// optim/amp.cpp: master weights - creation, fused unscale, copy back, checkpoint slices (optim/amp.h).
#include "optim/amp.h"

#include <map>

#include "core/autocast.h"
#include "core/check.h"
#include "core/ops/copy/kernels.h"
#include "core/ops/copy/launch_count.h"
#include "optim/clip.h"
#include "optim/kernels/amp.h"

namespace tandem::optim {
namespace {

// dst = src rounded to dst's dtype, in place (both on one device, same numel).
void cast_into(const Tensor& src, Tensor& dst) {
  if (src.numel() > 0) ops::cast_launches().add(src.dtype(), dst.dtype());
#ifdef TANDEM_WITH_CUDA
  if (dst.is_cuda()) return ::tandem::kernels::cast_cuda(src, dst);
#endif
  ::tandem::kernels::cast_cpu(src, dst);
}

}  // namespace

std::vector<ParamSegment> segments_from_parameters(const NamedTensors& named_params) {
  std::vector<ParamSegment> out;
  for (const auto& [name, p] : named_params) {
    ParamSegment s;
    s.name = name;
    s.param = p;
    s.param_index = static_cast<int64_t>(out.size());
    out.push_back(std::move(s));
  }
  return out;
}

MasterWeights::MasterWeights(std::vector<ParamSegment> model) {
  for (ParamSegment& m : model) {
    TANDEM_CHECK(m.param.defined() && (m.param.dtype() == DType::F32 || autocast::is_16bit(m.param.dtype())),
                 "MasterWeights: parameter '", m.name, "' must be f32, f16 or bf16, got ",
                 m.param.defined() ? m.param.str() : std::string("an undefined tensor"));
    Seg s;
    s.model = std::move(m);
    s.model.grad = Tensor();
    if (autocast::is_16bit(s.model.param.dtype())) {
      s.master = Tensor::empty(s.model.param.shape(), DType::F32, s.model.param.device());
      cast_into(s.model.param, s.master);
    } else {
      s.master = s.model.param;
    }
    s.master_grad = Tensor::empty(s.model.param.shape(), DType::F32, s.model.param.device());
    segs_.push_back(std::move(s));
  }
}

std::vector<ParamSegment> MasterWeights::master_segments() const {
  std::vector<ParamSegment> out;
  for (size_t i = 0; i < segs_.size(); ++i) {
    ParamSegment p = segs_[i].model;
    p.param = segs_[i].master;
    p.grad = segs_[i].master_grad;
    // The update writes the 16-bit parameter itself (optim/optimizer.h "Mixed precision").
    if (!segs_[i].master.shares_storage(segs_[i].model.param)) p.low = segs_[i].model.param;
    if (p.param_index < 0) p.param_index = static_cast<int64_t>(i);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Tensor> MasterWeights::model_grads() const {
  std::vector<Tensor> out;
  for (const Seg& s : segs_) out.push_back(s.model.param.grad());
  return out;
}

bool MasterWeights::unscale_and_check(const std::vector<Tensor>& grads, double inv_scale) {
  TANDEM_CHECK(grads.size() == segs_.size(), "MasterWeights::unscale_and_check: got ", grads.size(),
               " gradients for ", segs_.size(), " segments; pass one per segment, in order");
  // One fused pass per (device, dtype) group.
  std::map<std::pair<int, DType>, std::vector<kernels::UnscalePair>> groups;
  std::map<int, bool> is_cuda;
  for (size_t i = 0; i < segs_.size(); ++i) {
    Seg& s = segs_[i];
    const Tensor& g = grads[i];
    s.has_grad = g.defined();
    if (!s.has_grad) continue;
    TANDEM_CHECK(g.numel() == s.master_grad.numel() && g.device() == s.master_grad.device(), "MasterWeights: gradient ",
                 g.str(), " of '", s.model.name, "' does not match its parameter ", s.model.param.str());
    const int dev = g.is_cuda() ? g.device().index : -1;
    is_cuda[dev] = g.is_cuda();
    groups[{dev, g.dtype()}].push_back({g.data_ptr(), static_cast<float*>(s.master_grad.data_ptr()), g.numel()});
  }
  const auto inv = static_cast<float>(inv_scale);
  bool found = false;
  std::map<int, Tensor> flags;  // per GPU: a device int the launches OR into, read once
  for (const auto& [key, pairs] : groups) {
    const auto [dev, dtype] = key;
    if (dev < 0) {
      found |= kernels::unscale_check_cpu(dtype, pairs, inv);
      continue;
    }
#ifdef TANDEM_WITH_CUDA
    Tensor& flag = flags[dev];
    if (!flag.defined()) flag = Tensor::zeros({1}, DType::I32, Device::cuda(dev));
    kernels::unscale_check_cuda(dtype, dev, pairs, inv, static_cast<int*>(flag.data_ptr()));
#endif
  }
  for (const auto& [dev, flag] : flags) found |= flag.item() != 0.0;
  return found;
}

std::vector<Tensor> MasterWeights::master_grads() const {
  std::vector<Tensor> out;
  for (const Seg& s : segs_) out.push_back(s.has_grad ? s.master_grad : Tensor());
  return out;
}

void MasterWeights::copy_to_model() {
  for (Seg& s : segs_)
    if (!s.master.shares_storage(s.model.param)) cast_into(s.master, s.model.param);
}

void MasterWeights::unscale_and_flag(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf) {
  TANDEM_CHECK(grads.size() == segs_.size(), "MasterWeights::unscale_and_flag: got ", grads.size(),
               " gradients for ", segs_.size(), " segments; pass one per segment, in order");
  TANDEM_CHECK(scale.numel() == 1 && scale.dtype() == DType::F32 && found_inf.numel() == 1 &&
                   found_inf.dtype() == DType::F32 && scale.device() == found_inf.device(),
               "MasterWeights::unscale_and_flag: scale and found_inf must be one-element f32 tensors on one device "
               "(the tensor-mode LossScaler's scale_tensor() and found_inf()), got ", scale.str(), " and ",
               found_inf.str());
  const Device dev = found_inf.device();
  std::map<DType, std::vector<kernels::UnscalePair>> groups;  // one fused pass per dtype
  for (size_t i = 0; i < segs_.size(); ++i) {
    Seg& s = segs_[i];
    const Tensor& g = grads[i];
    s.has_grad = g.defined();
    if (!s.has_grad) continue;
    TANDEM_CHECK(g.numel() == s.master_grad.numel() && g.device() == dev, "MasterWeights::unscale_and_flag: gradient ",
                 g.str(), " of '", s.model.name, "' does not match its parameter ", s.model.param.str(),
                 " or is not on the flag's device ", dev.str());
    groups[g.dtype()].push_back({g.data_ptr(), static_cast<float*>(s.master_grad.data_ptr()), g.numel()});
  }
  if (!dev.is_cuda()) {
    // The eager pass, with the inverse rounded as the CUDA kernel and the host path round it.
    const auto inv = static_cast<float>(1.0 / static_cast<double>(*scale.data<float>()));
    bool found = false;
    for (const auto& [dtype, pairs] : groups) found |= kernels::unscale_check_cpu(dtype, pairs, inv);
    *found_inf.data<float>() = found ? 1.0f : 0.0f;
    return;
  }
#ifdef TANDEM_WITH_CUDA
  Tensor flag = found_inf;
  flag.zero_();  // a memset on the compute stream: part of the step, inside a capture too
  for (const auto& [dtype, pairs] : groups)
    kernels::unscale_flag_cuda(unscale_tables_[{dev.index, dtype}], dtype, dev.index, pairs, scale.data<float>(),
                               flag.data<float>());
#endif
}

void MasterWeights::copy_to_model(const Tensor& found_inf) {
  TANDEM_CHECK(found_inf.numel() == 1 && found_inf.dtype() == DType::F32,
               "MasterWeights::copy_to_model: found_inf must be a one-element f32 tensor, got ", found_inf.str());
  const Device dev = found_inf.device();
  for (const Seg& s : segs_)
    TANDEM_CHECK(s.master.device() == dev, "MasterWeights::copy_to_model: '", s.model.name, "' is on ",
                 s.master.device().str(), " but found_inf on ", dev.str());
  if (!dev.is_cuda()) {
    if (*found_inf.data<float>() == 0.0f) copy_to_model();
    return;
  }
#ifdef TANDEM_WITH_CUDA
  std::map<DType, std::vector<kernels::CopyPair>> groups;  // one launch per 16-bit dtype
  for (Seg& s : segs_)
    if (!s.master.shares_storage(s.model.param))
      groups[s.model.param.dtype()].push_back(
          {static_cast<const float*>(s.master.data_ptr()), s.model.param.data_ptr(), s.master.numel()});
  for (const auto& [dtype, pairs] : groups)
    kernels::copy_back_cuda(copy_tables_[{dev.index, dtype}], dtype, dev.index, pairs, found_inf.data<float>());
#endif
}

void MasterWeights::copy_from_model() {
  for (Seg& s : segs_)
    if (!s.master.shares_storage(s.model.param)) cast_into(s.model.param, s.master);
}

std::vector<StateSlice> MasterWeights::state_slices() const {
  std::vector<StateSlice> out;
  for (const Seg& s : segs_) {
    if (s.master.shares_storage(s.model.param)) continue;  // f32: the model checkpoint holds it
    const int64_t full = s.model.param_numel < 0 ? s.model.param.numel() : s.model.param_numel;
    out.push_back({s.model.name, s.model.offset, full, s.master.view({s.master.numel()})});
  }
  return out;
}

void MasterWeights::load_state(const NamedTensors& masters) {
  for (Seg& s : segs_) {
    if (s.master.shares_storage(s.model.param)) continue;
    for (const auto& [name, t] : masters) {
      if (name != s.model.name) continue;
      const int64_t n = s.master.numel();
      TANDEM_CHECK(t.numel() >= s.model.offset + n, "MasterWeights::load_state: '", name, "' holds ", t.numel(),
                   " values, the parameter needs ", s.model.offset + n);
      Tensor src = t.view({t.numel()}).slice(s.model.offset, s.model.offset + n);
      if (src.dtype() != DType::F32) src = src.to(DType::F32);
      s.master.view({n}).copy_(src);
    }
  }
  copy_to_model();
}

int64_t MasterWeights::bytes() const {
  int64_t n = 0;
  for (const Seg& s : segs_) {
    if (!s.master.shares_storage(s.model.param)) n += static_cast<int64_t>(s.master.nbytes());
    n += static_cast<int64_t>(s.master_grad.nbytes());
  }
  return n;
}

bool amp_step(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
              const AmpStepOptions& options) {
  bool found = master.unscale_and_check(grads, 1.0 / scaler.scale());
  if (options.found_inf_reduce) found = options.found_inf_reduce(found);
  if (!scaler.update(found)) return false;
  optimizer.set_grads(master.master_grads());
  if (options.clip_grad_norm > 0) clip_grad_norm(optimizer, options.clip_grad_norm, options.norm_reduce);
  optimizer.step();  // writes the 16-bit parameters too: no copy_to_model pass
  return true;
}

bool amp_step(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
              const FoundInfReduce& reduce) {
  AmpStepOptions o;
  o.found_inf_reduce = reduce;
  return amp_step(master, scaler, optimizer, grads, o);
}

void amp_step_device(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
                     const DeviceAmpStepOptions& options) {
  TANDEM_CHECK(scaler.tensor_mode(), "amp_step_device: the LossScaler keeps its state on the host; build it with "
               "LossScalerOptions::device set (or call amp_step)");
  Tensor flag = scaler.found_inf();
  master.unscale_and_flag(grads, scaler.scale_tensor(), flag);
  if (options.found_inf_reduce) {
    options.found_inf_reduce(flag);
    TANDEM_CHECK(flag.numel() == 1 && flag.dtype() == DType::F32 && flag.data_ptr() == scaler.found_inf().data_ptr(),
                 "amp_step_device: found_inf_reduce must reduce the flag in place");
  }
  optimizer.set_grads(master.master_grads());
  if (options.clip) options.clip->clip(optimizer);
  optimizer.step(flag);  // and the 16-bit parameters, skipped alike: no copy_to_model pass
  scaler.update_on_device();
}

}  // namespace tandem::optim
