// optim/kernels/adamw.h: backend entry point of the fused AdamW update and what AdamW and LAMB's
// CUDA launches share (internal to optim/).
//
// Capturable (optim/optimizer.h): the kernels take only run-constant values as arguments
// (AdamConst); the LR (a device f64 that set_lr writes), each segment's update count and the
// found-inf flag are read from device memory, and each block computes its step's scalars
// (AdamHyper) from them, in f64 rounded once to f32, as the CPU loops do on the host.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "optim/kernels/low_copy.h"

namespace tandem::optim::kernels {

// One launch group's device state (optim/cuda/adam_math.cuh): its chunk tables, its count list and
// the device-side LR, kept between steps.
class AdamCudaGroup;

// One segment: every pointer on the same GPU; param, grad and moments of the same dtype.
struct AdamTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  float* step;          // the segment's update count (0-d f32): this step is t = *step + 1
  int64_t numel;
  int64_t param_index;  // LAMB only: which entry of the per-parameter norm sums this segment adds to
  void* low;            // the 16-bit working copy written with the update (f32 param); null: none
};

// The element math's run-constant f32 scalars (rounded once on the host): part of both structs below.
struct AdamElementConst {
  float beta1, beta2, eps, weight_decay;
  float one_minus_beta1, one_minus_beta2;
};

// The hyper-parameters that stay fixed for a run: kernel arguments. The f32 copies for the element
// math, and the f64 originals the per-step scalars are computed from.
struct AdamConst : AdamElementConst {
  double beta1_f64, beta2_f64, weight_decay_f64;
};

// The scalars of one step t, f64 rounded once to f32 (the same values as the CPU loops' scalars).
struct AdamHyper : AdamElementConst {
  float lr;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float step_size;              // AdamW: lr / bias_correction1
  float decay;                  // AdamW: 1 - lr * weight_decay
};

#ifdef TANDEM_WITH_CUDA
// Updates every segment in `ts` (one dtype, one device) with ONE launch on the compute stream, then
// advances their counts (a second, tiny launch). Skipped on the device where found_inf (null: never)
// is nonzero. `group` caches the device state between steps; `lr` is written to it when it changed.
// `low`: the kind of every segment's 16-bit copy (optim/kernels/low_copy.h), one per launch.
void adamw_step_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                     const AdamConst& k, double lr, const float* found_inf, LowKind low);
// Writes a new LR to the group's device copy now (outside any graph capture), so that a replayed
// step reads it; a no-op before the group's first step (that step writes it).
void adam_set_lr_cuda(const std::shared_ptr<AdamCudaGroup>& group, double lr);
#endif

}  // namespace tandem::optim::kernels
