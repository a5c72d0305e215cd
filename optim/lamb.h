// optim/lamb.h: LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in
// 76 minutes"), as NVIDIA apex's FusedLAMB with bias correction and adam_w_mode (the "reference
// LAMB" that BERT pretraining recipes use). For each parameter, at its own step t = 1, 2, ...:
//
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2      (Adam's moments)
//   u = (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps) + weight_decay * w
//   trust = ||w|| / ||u||   when both norms are > 0, else 1     (norms over the whole parameter)
//   w -= lr * trust * u
//
// Defaults (OptimizerOptions): lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight_decay 1e-2 - apex's.
// Differences from apex, on purpose: the trust ratio applies to every parameter (apex skips it for
// weight_decay == 0 groups unless use_nvlamb; tandem has one group, so it follows the paper), and
// there is no built-in gradient clipping (apex's max_grad_norm): call optim/clip.h first. No phi
// clamp of ||w|| (the paper's phi is the identity in every public implementation).
//
// Sharded (ZeRO): the norms are per parameter, but a segment holds part of one. step() sums
// ||w||^2 and ||u||^2 per segment into a vector of 2 * num_params doubles indexed by
// ParamSegment::param_index ([2i] = sum w^2, [2i + 1] = sum u^2), calls
// OptimizerOptions::norm_reduce on it (an all-reduce across ranks), and only then applies the
// trust ratios - so N ranks with one shard each take exactly the unsharded step. Without a hook the
// CUDA path never leaves the device; with norm_reduce, the vector makes one round trip through the
// host (so the step is not capturable); OptimizerOptions::norm_reduce_device instead gets the sums
// as a device tensor (f32 on CUDA, f64 on the CPU) to all-reduce in place on the device.
// CPU: two loops per segment, sums in f64. CUDA: two fused multi-tensor launches (optim/cuda/lamb.cu).
// All parameters of one LAMB must live on one device.
// Capturable unless norm_reduce is set: the LR, the step counts and the bias corrections are read
// or computed on the device (optim/adam_base.h), and step(found_inf) skips there.
#pragma once
#include <utility>

#include "optim/adam_base.h"

namespace tandem::optim {

class LAMB : public AdamFamily<LAMB> {
 public:
  using AdamFamily::AdamFamily;
  static constexpr AdamDefaults kDefaults{"LAMB", 1e-2, 1e-6};  // apex FusedLAMB's defaults
  bool capturable() const override;

 private:
  void update(std::vector<Slot*>& active, const Tensor& found_inf) override;
  void update_cpu(std::vector<std::vector<Slot*>>& groups);
  void update_cuda(std::vector<std::vector<Slot*>>& groups, const Tensor& found_inf);
};

}  // namespace tandem::optim
