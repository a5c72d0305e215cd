// optim/loss_scaler.cpp: the scale's growth and backoff (rules in optim/loss_scaler.h).
#include "optim/loss_scaler.h"

#include "core/check.h"

namespace tandem::optim {

LossScaler::LossScaler(LossScalerOptions opt) : opt_(opt), scale_(opt.enabled ? opt.init_scale : 1.0) {
  TANDEM_CHECK(opt_.init_scale > 0, "LossScaler: init_scale must be positive, got ", opt_.init_scale);
  TANDEM_CHECK(opt_.growth_factor > 1, "LossScaler: growth_factor must be above 1, got ", opt_.growth_factor);
  TANDEM_CHECK(opt_.backoff_factor > 0 && opt_.backoff_factor < 1,
               "LossScaler: backoff_factor must be in (0, 1), got ", opt_.backoff_factor);
  TANDEM_CHECK(opt_.growth_interval >= 1, "LossScaler: growth_interval must be at least 1, got ",
               opt_.growth_interval);
}

bool LossScaler::update(bool found_inf) {
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

NamedTensors LossScaler::state() const {
  auto scalar = [](double v) { return Tensor::full({}, v, DType::F32); };
  return {{"scale", scalar(scale_)},
          {"_growth_tracker", scalar(static_cast<double>(growth_tracker_))},
          {"skipped_steps", scalar(static_cast<double>(skipped_))}};
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
}

}  // namespace tandem::optim
