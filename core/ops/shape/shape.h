// core/ops/shape/shape.h: shape ops. Tensors are contiguous, so reshape is a free view; concat copies.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace tandem::ops {

Tensor reshape(const Tensor& x, const Shape& shape);  // differentiable view (-1 allowed)
Tensor flatten(const Tensor& x);                      // [N, ...] -> [N, prod(...)]
// Concatenates along the last dim (channels in NHWC); all other dims must match.
Tensor concat_channels(const std::vector<Tensor>& xs);
// Swaps dims 1 and 2 of a 4-D tensor, copying: [B, S, H, D] <-> [B, H, S, D] (attention heads).
Tensor transpose12(const Tensor& x);

}  // namespace tandem::ops
