// core/ops/ops.h: every differentiable op, in one include. Each header documents its op family.
//
// How an op family is laid out (the same scheme in optim/ for the fused optimizer updates):
//   core/ops/<family>.h            the public ops, documented (listed below)
//   core/ops/<family>.cpp          shape/dtype checks, backend dispatch (TANDEM_BACKEND), autograd
//   core/ops/kernels/<family>.h    the backend entry points: <name>_cpu and <name>_cuda, compute only
//   core/ops/cpu/<family>.cpp      the CPU reference implementation of those entry points
//   core/ops/cuda/<family>.cu      the CUDA implementation (or .cpp when it only calls a CUDA library)
// Math shared by both backends lives once, in a __host__ __device__ header (functors.h,
// pool_functors.h, dropout_functors.h, finite_functors.h). core/CMakeLists.txt globs these folders, so it is not edited.
//
// A new elementwise op touches three files:
//   1. core/ops/elementwise/functors.h: the functor, appended to fn::UnaryOps or fn::BinaryOps (its position
//      is its op code; the CPU loop and the CUDA kernel pick it up unchanged);
//   2. core/ops/elementwise/elementwise.h: the declaration;
//   3. core/ops/elementwise/elementwise.cpp: the op (run_unary<fn::X> / run_binary<fn::X>) and its backward.
// A new op family adds the five files above and one line below; both need tests: a finite-
// difference gradient check (tests/test_*_grad.cpp) and a CPU/CUDA parity test (tests/gpu_*.cpp).
#pragma once
#include "core/ops/attention/attention.h"    // defines: attention, scale_mask_softmax, split_qkv_heads, merge_heads
#include "core/ops/batchnorm/batchnorm.h"    // defines: batch_norm (train/eval, running stats)
#include "core/ops/batchnorm/batchnorm_add_relu.h"  // defines: batch_norm_add_relu (ResNet block tail)
#include "core/ops/conv/conv.h"         // defines: conv2d (NHWC, OHWI weights), Conv2dParams
#include "core/ops/copy/copy.h"         // defines: cast, to_device, cast_raw, fill_
#include "core/ops/dropout/dropout.h"      // defines: dropout
#include "core/ops/elementwise/elementwise.h"  // defines: add, sub, mul, scale, relu, relu_, gelu, in-place add_/scale_/axpby_
#include "core/ops/embedding/embedding.h"    // defines: embedding
#include "core/ops/finite/finite.h"       // defines: count_nonfinite, all_finite (the trainers' inf/NaN checks)
#include "core/ops/fused_bias/fused_bias.h"   // defines: bias_gelu, bias_dropout_add (transformer GEMM tails)
#include "core/ops/loss/loss.h"         // defines: cross_entropy (label smoothing), take_bad_label_count, topk_correct
#include "core/ops/matmul/matmul.h"       // defines: linear, matmul
#include "core/ops/norm/norm.h"         // defines: layer_norm
#include "core/ops/pool/pool.h"         // defines: max_pool2d, avg_pool2d, adaptive_avg_pool2d, global_avg_pool
#include "core/ops/reduce/reduce.h"       // defines: sum, mean
#include "core/ops/shape/shape.h"        // defines: reshape, flatten, concat_channels, transpose12
