// core/ops/ops.h: every differentiable op, in one include. Each header documents its op family.
//
// One folder per op family (core/ops/README.md gives the whole layout and its reasons):
//   <family>/<family>.h     the public ops, documented (listed below)
//   <family>/<family>.cpp   shape/dtype checks, backend dispatch (TANDEM_BACKEND), autograd
//   <family>/kernels.h      the backend entry points: <name>_cpu and <name>_cuda, compute only
//   <family>/cpu.cpp        the CPU reference implementation of those entry points
//   <family>/cuda.cu        the CUDA implementation (cuda.cpp when it only calls cuDNN or cuBLAS)
//   <family>/functors.h     math both backends share, __host__ __device__ (families that have some)
// What several families use (dispatch, widening, CUDA reductions, handles) is in common/.
// core/CMakeLists.txt globs the folders, so it is not edited.
//
// A new elementwise op touches one folder, core/ops/elementwise/, and one line here:
//   1. functors.h: the functor, appended to fn::UnaryOps or fn::BinaryOps (its position is its op
//      code; the CPU loop and the CUDA kernel pick it up unchanged);
//   2. elementwise.h: the declaration;
//   3. elementwise.cpp: the op (run_unary<fn::X> / run_binary<fn::X>) and its backward;
//   4. here: its name on elementwise.h's "defines:" line.
// A new op family is a new folder of the files above and one #include line below. Both need tests:
// a finite-difference gradient check (tests/test_*_grad.cpp) and a CPU/CUDA parity test
// (tests/gpu_*.cpp).
#pragma once
#include "core/ops/attention/attention.h"          // defines: attention, scale_mask_softmax, split_qkv_heads, merge_heads
#include "core/ops/batchnorm/batchnorm.h"          // defines: batch_norm (train/eval, running stats)
#include "core/ops/batchnorm/batchnorm_relu.h"     // defines: batch_norm_relu, batch_norm_add_relu (fused BN tails)
#include "core/ops/conv/conv.h"                    // defines: conv2d (NHWC, OHWI weights), Conv2dParams, conv2d_bias_relu
#include "core/ops/conv_bn/conv_bn.h"              // defines: conv2d_genstats, bn_finalize, conv2d_bn_relu_genstats (conv-BN fusion)
#include "core/ops/copy/copy.h"                    // defines: cast, to_device, cast_raw, fill_
#include "core/ops/dropout/dropout.h"              // defines: dropout
#include "core/ops/elementwise/elementwise.h"      // defines: add, sub, mul, scale, add_scalar, axpby, relu, relu_, gelu, square, pow, in-place add_/scale_/axpby_
#include "core/ops/embedding/embedding.h"          // defines: embedding
#include "core/ops/finite/finite.h"                // defines: count_nonfinite, all_finite (the trainers' inf/NaN checks)
#include "core/ops/fused_bias/fused_bias.h"        // defines: bias_gelu, bias_dropout_add (transformer GEMM tails)
#include "core/ops/loss/loss.h"                    // defines: cross_entropy (label smoothing), take_bad_label_count, topk_correct
#include "core/ops/matmul/matmul.h"                // defines: linear, matmul
#include "core/ops/norm/norm.h"                    // defines: layer_norm
#include "core/ops/pool/pool.h"                    // defines: max_pool2d, avg_pool2d, adaptive_avg_pool2d, global_avg_pool
#include "core/ops/reduce/reduce.h"                // defines: sum, mean
#include "core/ops/shape/shape.h"                  // defines: reshape, flatten, concat_channels, transpose12
