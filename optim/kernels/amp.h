// optim/kernels/amp.h: backend entry points of the fused unscale + inf/NaN check (internal to optim/).
//
// For every pair, dst[i] = float(src[i]) * inv_scale, and the result says whether any src[i] (so any
// dst[i]) was inf or NaN. One pass reads each gradient once: the check costs no extra sweep.
// src is f16, bf16 or f32; dst is f32; both have `numel` elements on the same device.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tandem::optim::kernels {

struct UnscalePair {
  const void* src;
  float* dst;
  int64_t numel;
};

// CPU: returns true when a non-finite value was seen.
bool unscale_check_cpu(DType src_dtype, const std::vector<UnscalePair>& ts, float inv_scale);

#ifdef TANDEM_WITH_CUDA
// CUDA: ONE launch for all pairs of `src_dtype` on `device` (compute stream). ORs into the device
// int *found_inf (the caller zeroes it once per step and reads it back once, after every dtype).
void unscale_check_cuda(DType src_dtype, int device, const std::vector<UnscalePair>& ts, float inv_scale,
                        int* found_inf);
#endif

}  // namespace tandem::optim::kernels
