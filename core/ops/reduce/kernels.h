// core/ops/reduce/kernels.h: backend entry points for full reductions (internal).
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

// out[0] = scale * sum(x), out is [1] in x's dtype. scale is 1 for sum and 1/numel for mean.
void sum_cpu(const Tensor& x, double scale, Tensor& out);
// dx[i] = scale * g[0] for every i (g is [1] in dx's dtype). g stays a tensor so CUDA never syncs.
void broadcast_scalar_cpu(const Tensor& g, double scale, Tensor& dx);
#ifdef TANDEM_WITH_CUDA
void sum_cuda(const Tensor& x, double scale, Tensor& out);
void broadcast_scalar_cuda(const Tensor& g, double scale, Tensor& dx);
#endif

}  // namespace tandem::kernels
