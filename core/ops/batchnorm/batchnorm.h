// core/ops/batchnorm/batchnorm.h: batch normalisation over all dims but the last (channels, NHWC).
//
// Training mode normalises with the batch statistics (biased variance) and updates the running
// stats in place, PyTorch's way: running = (1 - momentum) running + momentum * batch, with the
// unbiased variance (n / (n - 1)) in running_var. Eval mode uses the running stats and records a
// cheaper backward. Works for [N, H, W, C] and [N, C].
// Dtypes: weight, bias and the running stats are f32 for f32/f16/bf16 inputs (f64 for f64 inputs),
// so 16-bit activations keep f32 statistics and affine parameters; statistics accumulate in f32 on
// the GPU and f64 on the CPU. The CPU kernels run on the rank's OpenMP threads (core/threads.h)
// from 2^18 values, with the same bits on any thread count (batchnorm/cpu.cpp). weight/bias may be
// undefined (no affine); the running stats may be undefined in training (not tracked) but are
// required in eval. Training needs more than one value per channel (the variance of one sample is
// undefined).
#pragma once
#include "core/ops/batchnorm/types.h"
#include "core/tensor.h"

namespace tandem::ops {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// CUDA training mode: cuDNN's NHWC batch norm (SPATIAL_PERSISTENT) when BackendConfig::
// cudnn_batchnorm is on (core/backend.h), tandem's own kernels (core/ops/batchnorm/cuda.cu) when
// it is off or when cuDNN rejects the problem. Default on:
// the first H100 session (apps/results/2026-11-22-h100) measured the kernels at 13-27 % of copy
// bandwidth, and resnet50 at 0.76x PyTorch with them against 0.97x with cuDNN; both paths pass
// tests/gpu_opsa_parity.cpp. The kernels stay as the fallback and as the parity reference
// (cudnn_batchnorm off). Also gates the fused cuDNN paths of ops::batch_norm_relu and
// ops::batch_norm_add_relu (batchnorm_relu.h).
// Determinism: the cuDNN Developer Guide's "scaled atomic integer reduction that is deterministic"
// (cudnnBatchNormMode_t, SPATIAL_PERSISTENT) is introduced by "The rest of this section applies for
// NCHW mode only", so it says nothing about our NHWC calls. What covers them is the guide's
// Reproducibility section: "most of cuDNN's routines from a given version generate the same
// bit-wise results across runs when executed on GPUs with the same architecture and the same
// number of SMs", with batch norm not among the listed exceptions (atomics in some conv/pooling
// algorithms). So BackendConfig::deterministic needs no switch here; tests/gpu_bn_cudnn.cpp checks two runs for
// equal bits. Eval mode always runs the kernels.
// How often cuDNN's batch norm ran and refused (BatchNormCudnnStats, batchnorm/types.h).
BatchNormCudnnStats batchnorm_cudnn_stats();

}  // namespace tandem::ops
