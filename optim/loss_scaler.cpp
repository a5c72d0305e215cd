// optim/loss_scaler.cpp: the scale's growth and backoff (rules in optim/loss_scaler.h), on the host
// or on the state tensors' device.
#include "optim/loss_scaler.h"

#include "core/check.h"
#include "core/ops/elementwise/elementwise.h"
#include "optim/kernels/amp.h"

namespace tandem::optim {

LossScaler::LossScaler(LossScalerOptions opt) : opt_(opt), scale_(opt.enabled ? opt.init_scale : 1.0) {
  TANDEM_CHECK(opt_.init_scale > 0, "LossScaler: init_scale must be positive, got ", opt_.init_scale);
  TANDEM_CHECK(opt_.growth_factor > 1, "LossScaler: growth_factor must be above 1, got ", opt_.growth_factor);
  TANDEM_CHECK(opt_.backoff_factor > 0 && opt_.backoff_factor < 1,
               "LossScaler: backoff_factor must be in (0, 1), got ", opt_.backoff_factor);
  TANDEM_CHECK(opt_.growth_interval >= 1, "LossScaler: growth_interval must be at least 1, got ",
               opt_.growth_interval);
  if (opt_.device) {
    TANDEM_CHECK(opt_.growth_interval <= (int64_t{1} << 24), "LossScaler: growth_interval ", opt_.growth_interval,
                 " is beyond the 2^24 that tensor mode's f32 tracker counts exactly");
    state_ = Tensor::from_vector({static_cast<float>(scale_), 0.0f, 0.0f}, {kernels::kScalerEntries}, DType::F32,
                                 *opt_.device);
    found_inf_ = Tensor::zeros({1}, DType::F32, *opt_.device);
  }
}

void LossScaler::require_tensor_mode(const char* what) const {
  TANDEM_CHECK(tensor_mode(), "LossScaler::", what, ": this scaler keeps its state on the host; set "
               "LossScalerOptions::device for the tensor mode a captured step needs");
}

double LossScaler::scale() const {
  return tensor_mode() ? state_.slice(kernels::kScale, kernels::kScale + 1).item() : scale_;
}

int64_t LossScaler::skipped_steps() const {
  return tensor_mode() ? static_cast<int64_t>(state_.slice(kernels::kSkippedSteps, kernels::kSkippedSteps + 1).item())
                       : skipped_;
}

int64_t LossScaler::growth_tracker() const {
  return tensor_mode()
             ? static_cast<int64_t>(state_.slice(kernels::kGrowthTracker, kernels::kGrowthTracker + 1).item())
             : growth_tracker_;
}

bool LossScaler::update(bool found_inf) {
  TANDEM_CHECK(!tensor_mode(), "LossScaler::update: this scaler keeps its state on ", opt_.device->str(),
               " (tensor mode); call update_on_device() after the optimizer step, with found_inf() all-reduced");
  if (found_inf) {
    ++skipped_;
    growth_tracker_ = 0;
    if (opt_.enabled) scale_ *= opt_.backoff_factor;
    return false;
  }
  if (opt_.enabled && ++growth_tracker_ >= opt_.growth_interval) {
    scale_ *= opt_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

Tensor LossScaler::scale_loss(const Tensor& loss) const {
  if (!tensor_mode()) return ops::scale(loss, static_cast<float>(scale_));
  TANDEM_CHECK(loss.numel() == 1 && loss.device() == state_.device(), "LossScaler::scale_loss: tensor mode scales a "
               "one-value loss on ", state_.device().str(), ", got ", loss.str());
  Tensor s = scale_tensor().view(loss.shape());
  if (s.dtype() != loss.dtype()) s = s.to(loss.dtype());
  return ops::mul(loss, s);
}

Tensor LossScaler::scale_tensor() const {
  require_tensor_mode("scale_tensor");
  return state_.slice(kernels::kScale, kernels::kScale + 1);
}

Tensor LossScaler::found_inf() const {
  require_tensor_mode("found_inf");
  return found_inf_;
}

void LossScaler::update_on_device() {
  require_tensor_mode("update_on_device");
  const kernels::ScalerRule rule{static_cast<float>(opt_.growth_factor), static_cast<float>(opt_.backoff_factor),
                                 static_cast<float>(opt_.growth_interval), opt_.enabled};
  if (state_.is_cuda()) {
#ifdef TANDEM_WITH_CUDA
    kernels::scaler_update_cuda(state_.device().index, state_.data<float>(), found_inf_.data<float>(), rule);
#endif
    return;
  }
  kernels::scaler_update(state_.data<float>(), *found_inf_.data<float>(), rule);
}

NamedTensors LossScaler::state() const {
  auto scalar = [](double v) { return Tensor::full({}, v, DType::F32); };
  return {{"scale", scalar(scale())},
          {"_growth_tracker", scalar(static_cast<double>(growth_tracker()))},
          {"skipped_steps", scalar(static_cast<double>(skipped_steps()))}};
}

void LossScaler::load_state(const NamedTensors& state) {
  for (const auto& [name, t] : state) {
    TANDEM_CHECK(t.numel() == 1, "LossScaler::load_state: '", name, "' must hold one value, got ", t.str());
    const double v = t.item();
    if (name == "scale") {
      TANDEM_CHECK(v > 0, "LossScaler::load_state: the saved scale must be positive, got ", v);
      scale_ = opt_.enabled ? v : 1.0;
    } else if (name == "_growth_tracker") {
      growth_tracker_ = static_cast<int64_t>(v);
    } else if (name == "skipped_steps") {
      skipped_ = static_cast<int64_t>(v);
    } else {
      TANDEM_THROW("LossScaler::load_state: unknown entry '", name,
                   "'; expected scale, _growth_tracker and skipped_steps");
    }
  }
  if (tensor_mode()) {  // the values of the entries given, the current ones for the others
    std::vector<float> v = state_.to_vector();
    for (const auto& [name, t] : state) {
      const double x = name == "scale" ? scale_ : name == "_growth_tracker" ? growth_tracker_ : skipped_;
      v[name == "scale" ? kernels::kScale : name == "_growth_tracker" ? kernels::kGrowthTracker
                                                                       : kernels::kSkippedSteps] = static_cast<float>(x);
    }
    state_.copy_(Tensor::from_vector(v, {kernels::kScalerEntries}));
  }
}

}  // namespace tandem::optim
