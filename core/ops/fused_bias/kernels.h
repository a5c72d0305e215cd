// core/ops/fused_bias/kernels.h: backend entry points for bias_gelu, bias_dropout_add and conv2d_bias_relu's
// bias + ReLU tails (internal).
//
// x, residual, y, dy, dx are [M, C] (any leading shape, contiguous), bias and dbias [C]. The op
// layer (core/ops/fused_bias/fused_bias.cpp) checks shapes, dtypes and devices. A `p` of 0 means no dropout
// (every element kept, scale 1); the mask rule is fn::Dropout (core/ops/dropout/functors.h).
// The backward entry points write dx and, when dbias is defined, dbias = column sums of dx (the
// float values before dx is rounded to its dtype), in the same pass over the data.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem::kernels {

struct DropoutMask {
  float p = 0;  // 0: keep everything
  uint64_t seed = 0, offset = 0;
  // Inside a CUDA graph capture: the device {seed, base} the CUDA kernels read instead of `seed`,
  // with `offset` relative to base (fn::with_slot; core/graph_rng.h). Null otherwise, always on the CPU.
  const uint64_t* slot = nullptr;
};

// y = gelu(x + bias)
void bias_gelu_cpu(const Tensor& x, const Tensor& bias, Tensor& y);
// dx = dy * gelu'(x + bias); dbias = column sums of dx
void bias_gelu_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Tensor& dbias);
// y = residual + dropout(x + bias)
void bias_dropout_add_cpu(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& y, DropoutMask m);
// dx = dropout(dy) with the forward's mask; dbias = column sums of dx
void dropout_bias_backward_cpu(const Tensor& dy, Tensor& dx, Tensor& dbias, DropoutMask m);
#ifdef TANDEM_WITH_CUDA
void bias_gelu_cuda(const Tensor& x, const Tensor& bias, Tensor& y);
void bias_gelu_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Tensor& dbias);
void bias_dropout_add_cuda(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& y, DropoutMask m);
void dropout_bias_backward_cuda(const Tensor& dy, Tensor& dx, Tensor& dbias, DropoutMask m);
#endif

// conv2d_bias_relu's tails (core/ops/conv/conv.h): y = relu(x + bias) (y may be x: in place), and
// dx = dy where y > 0 (fn::ReluBackward, y the forward's output); dbias = column sums of dx.
void bias_relu_cpu(const Tensor& x, const Tensor& bias, Tensor& y);
void relu_bias_backward_cpu(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias);
#ifdef TANDEM_WITH_CUDA
void bias_relu_cuda(const Tensor& x, const Tensor& bias, Tensor& y);
void relu_bias_backward_cuda(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias);
#endif

}  // namespace tandem::kernels
