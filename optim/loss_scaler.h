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
//
// Tensor mode (LossScalerOptions::device set; for a step captured as a CUDA graph, optim/amp.h):
// the scale, the growth tracker and the skipped-step count live in one f32 tensor on that device,
// and the found-inf flag in another (found_inf(), f32 [1]), as GradScaler keeps _scale,
// _growth_tracker and found_inf on the GPU. Nothing is read on the host during a step:
// MasterWeights::unscale_and_flag reads scale_tensor() and writes found_inf(), the caller
// all-reduces found_inf() across ranks (op max, or sum: any nonzero value means skip) on the device,
// the optimizer and the copy-back skip on the device where it is nonzero, and update_on_device()
// applies the rules above to the tensors (one-thread kernel on CUDA, the same function on the CPU).
// The scale is an f32 there, as GradScaler's: the sequence of scales equals the host mode's
// exactly while every scale is an f32 power of two (the defaults), and growth stops below f32's
// overflow (GradScaler's isfinite guard) where the host's f64 scale would go on. scale(),
// growth_tracker() and skipped_steps() read the tensors back (a device sync): for reports only.
// state()/load_state() keep the names and values of the host mode, so checkpoints move between
// the modes. Copies of a LossScaler share the tensors.
#pragma once
#include <cstdint>
#include <optional>

#include "core/device.h"
#include "optim/optimizer.h"

namespace tandem::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;    // 2^16, GradScaler's default: large enough for ImageNet CNNs' tiny gradients
  double growth_factor = 2.0;     // GradScaler's default; powers of two keep the scaling exact
  double backoff_factor = 0.5;    // GradScaler's default
  int64_t growth_interval = 2000; // GradScaler's default: clean steps before the scale grows
  bool enabled = true;            // false (bf16): the scale stays 1
  std::optional<Device> device;   // unset: host mode (update(bool)); set: tensor mode on that device
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions opt = {});
  // Host mode: the scale; tensor mode: read back from the device (a sync - for reports only).
  double scale() const;
  // Host mode: records one step's all-rank overflow decision and adapts the scale. Returns true when
  // the step should be applied, false when it must be skipped (found_inf). Refused in tensor mode.
  bool update(bool found_inf);
  int64_t skipped_steps() const;   // tensor mode: read back (a sync)
  int64_t growth_tracker() const;  // tensor mode: read back (a sync)
  const LossScalerOptions& options() const { return opt_; }
  // loss * scale(), differentiable (backward then carries the scale into every gradient). Tensor
  // mode multiplies by scale_tensor() on the device; `loss` must then hold one value.
  Tensor scale_loss(const Tensor& loss) const;

  // Tensor mode (see the file comment); each fails in host mode.
  bool tensor_mode() const { return state_.defined(); }
  Tensor scale_tensor() const;  // f32 [1]: the current scale, a view into the state
  Tensor found_inf() const;     // f32 [1]: nonzero when this step's gradients held inf/NaN
  // The rules above applied to the tensors from found_inf(), on their device: no host read.
  void update_on_device();

  NamedTensors state() const;
  // Missing entries keep their current values (a checkpoint written without AMP).
  void load_state(const NamedTensors& state);

 private:
  void require_tensor_mode(const char* what) const;
  LossScalerOptions opt_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  Tensor state_;      // tensor mode: f32 [3] {scale, growth tracker, skipped steps} (kernels/amp.h)
  Tensor found_inf_;  // tensor mode: f32 [1]
};

}  // namespace tandem::optim
