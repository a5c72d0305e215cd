// core/ops/embedding.h: table lookup. indices (i32 or i64) [...] into table [V, D] -> [..., D].
// The backward scatters-adds into a dense [V, D] gradient (repeated indices accumulate). An index
// outside [0, V) is an error on the CPU; on CUDA it is checked on the host before the launch.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor embedding(const Tensor& indices, const Tensor& table);

}  // namespace tandem::ops
