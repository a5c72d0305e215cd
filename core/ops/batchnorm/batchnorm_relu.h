// core/ops/batchnorm/batchnorm_relu.h: batch norm with its ReLU (and the ResNet block's residual add)
// as one op: y = relu(batch_norm(x)) and y = relu(batch_norm(x) + z).
//
// batch_norm_relu is every conv -> BN -> ReLU (ResNet's stem and the inner stages of its blocks,
// VGG-BN); batch_norm_add_relu is the ResNet block tail, where x is the last conv's output and z the
// residual (the block input or its downsample), both [N, H, W, C] (or [N, C]) of one dtype. weight,
// bias and the running stats as ops::batch_norm. Same values and gradients as the compositions
// relu(batch_norm(x)) and relu(add(batch_norm(x), z)), which are the reference and the path
// everywhere except below.
// CPU, training mode, f32 and f64: one recorded node and tandem's fused kernels
// (batchnorm/cpu.cpp): the statistics pass, then y = max(x * scale + shift [+ z], 0) in one pass;
// backward applies the ReLU mask (from y) inside the gradient-sum and dx passes and writes dz there.
// The arithmetic is the composition's, in its order, so values and gradients are its bytes
// (tests/test_bn_relu_cpu.cpp); 16-bit CPU tensors keep the composition (widened BN, then add, ReLU).
// CUDA, training mode, BackendConfig::cudnn_batchnorm on: each is one cuDNN call each way
// (CUDNN_BATCHNORM_OPS_BN_ACTIVATION / BN_ADD_ACTIVATION): the normalised tensor (and the sum) are
// never written to memory, and backward reads the ReLU mask from cuDNN's reserve space, so no
// separate ReLU forward or ReLU backward pass runs.
// Eval mode runs the composition on every backend (tandem's BN kernel, then ReLU in place): the
// training step, which is what the fusion is for, never runs it, and a fused eval kernel would be a
// second copy of the eval forward in both kernel files for one pass less in validation.
// ReLU's gradient at exactly 0 is 0 (PyTorch's convention), on every path. NaN: the composition
// and the CPU's fused kernels follow PyTorch (relu(NaN) = NaN, and dy passes where the output is
// NaN, fn::ReluBackward); the
// cuDNN call propagates NaN forward (CUDNN_PROPAGATE_NAN), but its backward reads the ReLU mask
// from the reserve space, and whether a NaN output passes dy there is cuDNN's choice (not
// documented; tests/gpu_opsa_parity.cpp and tests/gpu_bn_relu.cpp check that dx stays non-finite
// where the CPU's is).
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                           Tensor& running_mean, Tensor& running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);

}  // namespace tandem::ops
