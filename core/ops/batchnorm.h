// core/ops/batchnorm.h: batch normalisation over all dims but the last (channels, NHWC).
//
// Training mode normalises with the batch statistics (biased variance) and updates the running
// stats in place, PyTorch's way: running = (1 - momentum) running + momentum * batch, with the
// unbiased variance (n / (n - 1)) in running_var. Eval mode uses the running stats and records a
// cheaper backward. Works for [N, H, W, C] and [N, C].
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace tandem::ops
