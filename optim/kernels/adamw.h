// optim/kernels/adamw.h: backend entry point of the fused AdamW update (internal to optim/).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace tandem::optim::kernels {

class DeviceTable;  // optim/cuda/multi_tensor.cu: a host table mirrored on the device

// One segment: every pointer on the same GPU, all of the same dtype.
struct AdamTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t numel;
  int64_t param_index;  // LAMB only: which entry of the per-parameter norm sums this segment adds to
};

// Per-step scalars, computed on the host in f64 and rounded once to f32 (same values as the CPU loop).
struct AdamHyper {
  float beta1, beta2, eps, weight_decay;
  float one_minus_beta1, one_minus_beta2;
  float lr;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float step_size;              // AdamW: lr / bias_correction1
  float decay;                  // AdamW: 1 - lr * weight_decay
};

#ifdef TANDEM_WITH_CUDA
// Updates every segment in `ts` (one dtype, one device, one step count) with ONE launch on the
// compute stream. `table` caches the device chunk table between steps.
void adamw_step_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device, const std::vector<AdamTensor>& ts,
                     const AdamHyper& h);
#endif

}  // namespace tandem::optim::kernels
