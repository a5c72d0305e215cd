// core/ops/batchnorm/batchnorm_add_relu.h: the ResNet block tail as one op, y = relu(batch_norm(x) + z).
//
// x is the last conv's output, z the residual (the block input or its downsample), both
// [N, H, W, C] (or [N, C]) of one dtype; weight, bias and the running stats as ops::batch_norm.
// Same values and gradients as relu(add(batch_norm(x, ...), z)), which is the reference (and the
// path everywhere except below). On CUDA in training mode with BackendConfig::cudnn_batchnorm on, it is
// one cuDNN call each way (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION): the normalised tensor and the
// sum are never written to memory, and backward reads the ReLU mask from cuDNN's reserve space.
// ReLU's gradient at exactly 0 is 0 (PyTorch's convention), on both paths. NaN: the composition
// follows PyTorch (relu(NaN) = NaN, and dy passes where the output is NaN, fn::ReluBackward); the
// cuDNN call propagates NaN forward (CUDNN_PROPAGATE_NAN), but its backward reads the ReLU mask
// from the reserve space, and whether a NaN output passes dy there is cuDNN's choice (not
// documented; tests/gpu_opsa_parity.cpp checks that dx stays non-finite where the CPU's is).
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                           Tensor& running_mean, Tensor& running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);

}  // namespace tandem::ops
