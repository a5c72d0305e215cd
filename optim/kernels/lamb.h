// optim/kernels/lamb.h: backend entry points of the fused two-phase LAMB update (internal to optim/).
//
// Phase 1 updates the moments and ADDS, for each segment, sum(w^2) and sum(u^2) (u the LAMB update
// direction) into param_sums[2 * param_index] and [2 * param_index + 1] (a device array of f32 the
// caller zeroes once per step, so several groups and segments of one parameter add up). Between the
// phases the caller may all-reduce param_sums (ZeRO). Phase 2 recomputes u from the stored moments,
// applies w -= lr * trust * u with trust = ||w|| / ||u|| (1 when either is 0), and then advances
// the segments' counts. Both phases read the step t = count + 1, the LR and the found-inf flag from
// device memory (optim/kernels/adamw.h); a skipped step writes zero partial sums and changes nothing.
#pragma once
#include <memory>
#include <vector>

#include "optim/kernels/adamw.h"

namespace tandem::optim::kernels {

#ifdef TANDEM_WITH_CUDA
// `group` caches the chunk table, the per-parameter segment lists and the device LR; phase 2 must
// get the same group and tensor list as phase 1 of the same step.
void lamb_phase1_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                      const AdamConst& k, double lr, const float* found_inf, float* param_sums);
// Phase 2 also writes each segment's 16-bit copy (`low`: their kind, one per launch).
void lamb_phase2_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                      const AdamConst& k, double lr, const float* found_inf, const float* param_sums, LowKind low);
#endif

}  // namespace tandem::optim::kernels
