// core/ops/pool/kernels.h: backend entry points for pooling (internal).
//
// The op layer (core/ops/pool/pool.cpp) validates parameters, computes output sizes and records
// autograd; these functions only compute, on contiguous NHWC tensors described by a pool::Geom.
// Max pooling saves, per output element, the plane index h * W + w (int32) of the cell that won the
// window (pool::max_takes: the first maximum, or the last NaN); the backward routes dy there. Average pooling (fixed or adaptive
// windows) needs no saved state. Backwards write every element of dx (no pre-zeroing needed).
#pragma once
#include "core/ops/pool/functors.h"
#include "core/tensor.h"

namespace tandem::kernels {

void max_pool2d_forward_cpu(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax);
void max_pool2d_backward_cpu(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx);
void avg_pool2d_forward_cpu(const Tensor& x, const pool::Geom& g, Tensor& y);
void avg_pool2d_backward_cpu(const Tensor& dy, const pool::Geom& g, Tensor& dx);
#ifdef TANDEM_WITH_CUDA
void max_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax);
void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx);
void avg_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y);
void avg_pool2d_backward_cuda(const Tensor& dy, const pool::Geom& g, Tensor& dx);
#endif

}  // namespace tandem::kernels
