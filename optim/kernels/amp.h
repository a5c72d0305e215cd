// optim/kernels/amp.h: backend entry points of mixed precision's fused passes (internal to optim/).
//
// Unscale + inf/NaN check: for every pair, dst[i] = float(src[i]) * inv_scale, and whether any
// src[i] (so any dst[i]) was inf or NaN. One pass reads each gradient once: the check costs no extra
// sweep. src is f16, bf16 or f32; dst is f32; both have `numel` elements on the same device.
// The capturable forms (optim/amp.h, "a captured step") read the scale from device memory and
// write a device f32 flag; the copy-back skips on that flag; the loss scaler's tensor-mode update
// is scaler_update below, one function for the CPU and the one-thread CUDA kernel.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

#ifndef TANDEM_HD  // as core/ops/common/hd.h
#ifdef __CUDACC__
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif
#endif

namespace tandem::optim::kernels {

class DeviceTable;  // optim/cuda/multi_tensor.cuh

struct UnscalePair {
  const void* src;
  float* dst;
  int64_t numel;
};

// The master copy-back: dst (16-bit) = src (f32) rounded to nearest even, as core's cast.
struct CopyPair {
  const float* src;
  void* dst;
  int64_t numel;
};

// The tensor-mode scaler state, f32 [3] (optim/loss_scaler.h): its entries, and the rules.
enum ScalerEntry { kScale = 0, kGrowthTracker = 1, kSkippedSteps = 2, kScalerEntries = 3 };
struct ScalerRule {
  float growth_factor, backoff_factor;
  float growth_interval;  // an f32 like the tracker it is compared with (exact to 2^24)
  bool enabled;
};

// GradScaler's update (torch._amp_update_scale_) on the state, given this step's all-rank flag.
TANDEM_HD void scaler_update(float* state, float found_inf, const ScalerRule& r) {
  if (found_inf != 0.f) {
    state[kSkippedSteps] += 1.f;
    state[kGrowthTracker] = 0.f;
    if (r.enabled) state[kScale] *= r.backoff_factor;
    return;
  }
  if (!r.enabled) return;
  state[kGrowthTracker] += 1.f;
  if (state[kGrowthTracker] >= r.growth_interval) {
    const float grown = state[kScale] * r.growth_factor;
    if (grown <= 3.40282346638528859812e+38f) state[kScale] = grown;  // FLT_MAX: GradScaler's isfinite guard
    state[kGrowthTracker] = 0.f;
  }
}

// CPU: returns true when a non-finite value was seen.
bool unscale_check_cpu(DType src_dtype, const std::vector<UnscalePair>& ts, float inv_scale);

#ifdef TANDEM_WITH_CUDA
// CUDA: ONE launch for all pairs of `src_dtype` on `device` (compute stream). ORs into the device
// int *found_inf (the caller zeroes it once per step and reads it back once, after every dtype).
void unscale_check_cuda(DType src_dtype, int device, const std::vector<UnscalePair>& ts, float inv_scale,
                        int* found_inf);
// Capturable: the same with inv_scale = float(1 / double(*scale)) read on the device (the host
// path's rounding), setting the f32 *found_inf to 1 (the caller zeroes it once per step, on the
// device). `table` caches the chunk table between steps.
void unscale_flag_cuda(std::shared_ptr<DeviceTable>& table, DType src_dtype, int device,
                       const std::vector<UnscalePair>& ts, const float* scale, float* found_inf);
// Capturable copy-back of every pair of `dst_dtype` in one launch, skipped where *found_inf != 0.
void copy_back_cuda(std::shared_ptr<DeviceTable>& table, DType dst_dtype, int device, const std::vector<CopyPair>& ts,
                    const float* found_inf);
// scaler_update on the device: one thread, on the compute stream.
void scaler_update_cuda(int device, float* state, const float* found_inf, const ScalerRule& r);
#endif

}  // namespace tandem::optim::kernels
