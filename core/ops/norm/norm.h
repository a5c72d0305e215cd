// core/ops/norm/norm.h: layer normalisation over the last dimension (transformers).
// y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance, stats in f32.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace tandem::ops
