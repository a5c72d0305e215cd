// optim/adamw.h: Adam with decoupled weight decay, exactly torch.optim.AdamW's update
// (amsgrad = False, maximize = False). For each parameter, at its own step t = 1, 2, ...:
//
//   w   = w * (1 - lr * weight_decay)            decoupled decay (Loshchilov & Hutter 2019)
//   m   = beta1 * m + (1 - beta1) * g            "exp_avg"
//   v   = beta2 * v + (1 - beta2) * g^2          "exp_avg_sq"
//   w  -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// Defaults (OptimizerOptions): lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2 - PyTorch's.
// CPU: a loop per segment in f32 (f64 for f64 parameters). CUDA: one fused multi-tensor launch per
// (dtype, device) group (optim/cuda/adamw.cu), math in f32. Elementwise, so a segment (ZeRO,
// optim/optimizer.h) updates exactly like those elements of the whole parameter.
// State: "<name>.step", "<name>.exp_avg", "<name>.exp_avg_sq" (optim/optimizer.h).
// Capturable: the LR, the step count t and so the bias corrections are read or computed on the
// device (optim/adam_base.h), and step(found_inf) skips there (PyTorch's fused AdamW with found_inf).
#pragma once
#include <utility>

#include "optim/adam_base.h"

namespace tandem::optim {

class AdamW : public AdamFamily<AdamW> {
 public:
  using AdamFamily::AdamFamily;
  static constexpr AdamDefaults kDefaults{"AdamW", 1e-2, 1e-8};  // torch.optim.AdamW's defaults
  bool capturable() const override { return true; }

 private:
  void update(std::vector<Slot*>& active, const Tensor& found_inf) override;
};

}  // namespace tandem::optim
