// core/ops/finite/finite.h: inf/NaN detection over one tensor or a whole parameter list, on the device.
//
// What the trainers' non-finite check calls (issue 20): on the gradients before the update, on
// the parameters after it, and on the logits in validation (a non-finite logit must report a
// failure, never an accuracy). Not differentiable; reads the tensors' data, records nothing.
//
//   count_nonfinite(ts)  the number of inf/NaN elements over every tensor in ts, as an i64 [1]
//                        tensor on their device. No host sync: it can be all-reduced across ranks
//                        (sum) and read once, and it can run inside a captured CUDA graph.
//   all_finite(ts)       the host convenience: count_nonfinite, read back once (one sync on CUDA).
//
// Undefined tensors, empty ones and integer tensors (they cannot hold inf/NaN) are skipped, so a
// gradient list with holes (frozen or unused parameters) or a state list with i64 counters can be
// passed as it is. Floating dtypes: f32, f16, bf16 and f64, on both backends; the test is on the
// raw bits (fn::NonfiniteBits), so 16-bit values are never widened. All counted tensors must live
// on one device (the count's); an empty list counts 0, on `device` or on the CPU.
// Cost on CUDA: one kernel launch per dtype present (per 512 tensors of a dtype: see
// core/ops/finite/cuda.cu), reading every element once; the CPU runs a plain loop.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace tandem::ops {

// On the device of the first counted tensor (the CPU when none is counted).
Tensor count_nonfinite(const std::vector<Tensor>& ts);
// On `device`, which every counted tensor must be on (a rank with an empty shard still gets a
// count on its GPU, ready for the all-reduce).
Tensor count_nonfinite(const std::vector<Tensor>& ts, Device device);
bool all_finite(const std::vector<Tensor>& ts);
bool all_finite(const Tensor& x);

}  // namespace tandem::ops
