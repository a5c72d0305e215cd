// optim/loss_scaler.h: dynamic loss scaling for fp16 training (PyTorch's torch.amp.GradScaler rules).
//
// fp16 keeps 10 mantissa bits and flushes values below 2^-24 to zero, so small gradients vanish.
// The loss is multiplied by scale() before backward, which shifts every gradient up by the same
// power of two; MixedPrecision (optim/amp.h) divides it out again in f32. The scale adapts:
//   - a step whose gradients hold an inf or NaN is SKIPPED and the scale is multiplied by
//     backoff_factor (the scale was too large);
//   - after growth_interval consecutive clean steps the scale is multiplied by growth_factor (try a
//     larger one: more of the small gradients survive).
// update() must get the same found_inf on every rank (the caller reduces it across ranks first), so
// every rank skips the same steps and keeps the same scale.
// bf16 has f32's exponent range, so it needs no scaling: enabled = false fixes the scale at 1 but
// still skips (and counts) steps with non-finite gradients.
// Checkpoint state (state()/load_state()), PyTorch's GradScaler.state_dict() names:
//   "scale" (f32 []), "_growth_tracker" (f32 []: clean steps since the last change), and tandem's
//   "skipped_steps" (f32 []).
#pragma once
#include <cstdint>

#include "optim/optimizer.h"

namespace tandem::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;    // 2^16, GradScaler's default: large enough for ImageNet CNNs' tiny gradients
  double growth_factor = 2.0;     // GradScaler's default; powers of two keep the scaling exact
  double backoff_factor = 0.5;    // GradScaler's default
  int64_t growth_interval = 2000; // GradScaler's default: clean steps before the scale grows
  bool enabled = true;            // false (bf16): the scale stays 1
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions opt = {});
  double scale() const { return scale_; }
  // Records one step's all-rank overflow decision and adapts the scale. Returns true when the step
  // should be applied, false when it must be skipped (found_inf).
  bool update(bool found_inf);
  int64_t skipped_steps() const { return skipped_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  const LossScalerOptions& options() const { return opt_; }

  NamedTensors state() const;
  // Missing entries keep their current values (a checkpoint written without AMP).
  void load_state(const NamedTensors& state);

 private:
  LossScalerOptions opt_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tandem::optim
