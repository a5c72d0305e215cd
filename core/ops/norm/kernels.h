// core/ops/norm/kernels.h: backend entry points for layer normalisation (internal).
//
// x is viewed as [M, D] (D = last dim); weight and bias are [D] in x's dtype. mean and rstd are [M]
// in the statistics dtype (f64 for f64 x, f32 otherwise), written by the forward for the backward.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(biased var + eps).
void layer_norm_fwd_cpu(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                        Tensor& rstd);
// With xhat = (x - mean) * rstd and g = dy * w (per row):
//   dx = rstd * (g - mean_D(g) - xhat * mean_D(g * xhat)),  dw = sum_M(dy * xhat),  db = sum_M(dy).
// dx, dw, db are overwritten (=), not accumulated into.
void layer_norm_bwd_cpu(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx, Tensor& dw, Tensor& db);
#ifdef TANDEM_WITH_CUDA
void layer_norm_fwd_cuda(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                         Tensor& rstd);
void layer_norm_bwd_cuda(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         Tensor& dx, Tensor& dw, Tensor& db);
#endif

}  // namespace tandem::kernels
