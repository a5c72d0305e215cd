// core/ops/batchnorm/kernels.h: backend entry points for batch normalisation (internal).
//
// Tensors arrive viewed as [M, C]: M = N*H*W (or N) rows, C channels, channels fastest (NHWC).
// Per-channel tensors (weight, bias, running stats, saved stats, their gradients) have the
// "parameter dtype": f64 for f64 inputs, f32 otherwise (also for f16/bf16 inputs, so statistics
// and affine parameters keep f32 precision in mixed-precision training). weight/bias may be
// undefined (no affine: 1 and 0); running stats may be undefined in training (not tracked).
#pragma once
#include "core/ops/batchnorm/types.h"
#include "core/tensor.h"

namespace tandem::kernels {

// training: save_mean/save_invstd get the batch mean and 1/sqrt(biased var + eps); defined running
//           stats are updated in place with the unbiased variance M/(M-1) * var and `momentum`.
// eval:     save_mean = running_mean, save_invstd = 1/sqrt(running_var + eps).
// Both:     y = (x - save_mean) * save_invstd * weight + bias.
void batchnorm_forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                           Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                           Tensor& save_mean, Tensor& save_invstd);
// With xhat = (x - save_mean) * save_invstd, and sums over the M rows:
//   dbias = sum dy, dweight = sum dy * xhat;
//   training: dx = weight * invstd * (dy - sum(dy)/M - xhat * sum(dy * xhat)/M)  (through the stats)
//   eval:     dx = weight * invstd * dy                                          (stats are constants)
// Outputs that are undefined are not computed.
void batchnorm_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                            const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias);
// The CPU's fused tails in training mode (ops::batch_norm_relu, ops::batch_norm_add_relu), f32 and
// f64: the statistics, running stats and save_mean/save_invstd as batchnorm_forward_cpu, then in one
// pass y = t <= 0 ? 0 : t with t = x * scale + shift (+ z for AddRelu; z undefined for Relu), the
// composition's operations in its order, so y has relu(batch_norm(x) [+ z])'s bytes.
void batchnorm_forward_fused_cpu(ops::BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                                 const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd);
// Its backward, given the forward's y: g = y <= 0 ? 0 : dy (fn::ReluBackward: a NaN y passes dy),
// then the training backward above with g for dy; dz = g (AddRelu; undefined: not written). The mask
// is applied inside the sums pass and the dx pass, so no masked copy of dy is made unless dz is asked.
void batchnorm_backward_fused_cpu(ops::BatchNormTail tail, const Tensor& dy, const Tensor& x, const Tensor& y,
                                  const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                  Tensor& dx, Tensor& dz, Tensor& dweight, Tensor& dbias);
// How many threads the CPU kernels above give a pass over `numel` values (1 below their parallel
// threshold), or 0 when this build compiled them without OpenMP (always serial).
int batchnorm_cpu_threads(int64_t numel);
#ifdef TANDEM_WITH_CUDA
void batchnorm_forward_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                            Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                            Tensor& save_mean, Tensor& save_invstd);
void batchnorm_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                             const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias);
// Training mode through cuDNN's NHWC batch norm (core/ops/batchnorm/cuda_cudnn.cpp). x is the
// unflattened [N, H, W, C] or [N, C] input; semantics as above. `tail` picks what the same call
// does after the normalisation (ops::BatchNormTail): None, y = relu(bn(x)) (Relu), or
// y = relu(bn(x) + z) (AddRelu; z has x's shape and dtype, undefined otherwise). The backward, given
// the forward's tail and its y, also applies the ReLU's gradient and, for AddRelu, writes dz (the
// gradient of the residual). reserve is cuDNN's opaque reserve space (the ReLU mask), written by the
// forward and read by the backward; save_mean/save_invstd are cuDNN's own too (opaque: only this
// backward reads them). The forward returns false, having written nothing, when cuDNN does not take
// the problem: the caller runs the kernels above (and the ReLU, the add) instead. The backward
// always delivers: if cuDNN refuses it, the kernels run on statistics recomputed from x (and the
// ReLU's gradient is dy where y > 0 or y is NaN: fn::ReluBackward). Undefined dx/dweight/dbias are
// not returned; dz is allocated when undefined (AddRelu).
bool batchnorm_forward_train_cudnn(ops::BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                                   const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum,
                                   double eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& reserve);
// y: the forward's output (read for the ReLU's gradient); ignored (may be undefined) for None.
void batchnorm_backward_train_cudnn(ops::BatchNormTail tail, const Tensor& dy, const Tensor& x, const Tensor& y,
                                    const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& reserve, double eps, Tensor& dx,
                                    Tensor& dz, Tensor& dweight, Tensor& dbias);
ops::BatchNormCudnnStats batchnorm_cudnn_stats();  // see core/ops/batchnorm/types.h
#endif

}  // namespace tandem::kernels
