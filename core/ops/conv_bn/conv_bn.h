// core/ops/conv_bn/conv_bn.h: the forward pieces of NVIDIA's MLPerf-style conv-BN fusion for ResNet
// (issue 18 item 3), as ops with a CPU reference that pins their meaning:
//
//   conv2d_genstats(x, w, p)   y = conv2d(x, w) (no bias: a BN follows) AND y's per-channel batch
//                              statistics sum(y) and sum(y^2) over N, H, W, which on the GPU come
//                              out of the conv's epilogue (the frontend's genstats node), so BN's
//                              statistics pass over y (one full read) disappears.
//   bn_finalize(stats, ...)    from those sums, BN's training-mode per-channel terms: mean, inv_std
//                              = 1 / sqrt(var + eps), and the affine equivalent scale = weight *
//                              inv_std, bias = bias - mean * scale (bn(y) = y * scale + bias), and
//                              the running statistics updated in place exactly as ops::batch_norm
//                              does (core/ops/batchnorm/batchnorm.h): running = (1 - momentum)
//                              running + momentum * batch, with the unbiased variance n / (n - 1)
//                              in running_var. On the GPU, the frontend's bn_finalize node.
//   batch_norm_apply(y, ...)   relu(y * scale + bias) with batch_norm's gradients (below), so that
//                              conv2d_genstats -> bn_finalize -> batch_norm_apply trains exactly as
//                              conv2d -> batch_norm -> relu does (tests/test_conv_bn.cpp).
//
// Semantics: var = sum(y^2) / n - mean^2, the biased batch variance from the two sums (what genstats
// gives). ops::batch_norm's two-pass variance agrees to rounding, but the one-pass form cancels where
// |mean| >> std: in f32 a ResNet step's largest gradients then differ from batch_norm's by up to ~1 %
// (CPU resnet18, 4 x 64 x 64, measured), and with count 2 (1x1 maps, batch 2) even f64 loses digits.
// NVIDIA's fused kernels share the property. Statistics and the
// BN terms are f32 for f32/f16/bf16 activations and f64 for f64 (CPU gradient checks), as
// batch_norm's. The statistics are NOT differentiable outputs: they are y's sums, handed to the BN
// that follows; that BN's backward (d/dy through mean and var) accounts for them via y, so y's only
// gradient path is the conv node's (dgrad, wgrad).
//
//   conv2d_bn_relu_genstats(in, w, p)
//                              the next conv's prologue (NVIDIA MLPerf's scale-bias-relu-conv-genstats):
//                              conv2d(relu(in.x * fin.scale + fin.bias), w) with the output's
//                              statistics, so the previous BN's normalised activation is never
//                              written. Values and gradients are those of the composition
//                              conv2d_genstats(batch_norm_apply(in.x, fin, weight, bias, relu)).
//
// Switch: BackendConfig::conv_bn_fusion (core/backend.h), default off. Off, or on the CPU, or when
// cuDNN refuses a graph (counted by conv_bn_fusion_stats; the first refusal noted once on stderr):
// the plain conv and the sums by tensor ops, which is also the CPU reference.
// conv2d_bn_relu_genstats: off, it IS the composition (two nodes; batch_norm_apply keeps its input
// and its output for the backward). On, on either device, it is one autograd node that keeps only
// in.x. Forward: the graph on the GPU; where refused, or on the CPU, the reference's prologue as a
// temporary, then the plain conv. Backward: dw = wgrad(a, dy) with a = relu(x * scale + bias), and
// dz = dgrad(dy, w) * [x * scale + bias > 0], then batch_norm_apply's backward from dz. On the GPU
// each of the two is one graph (the prologue in front of the wgrad; dgrad -> RELU_BWD against the
// recomputed pre-activation), so a is never made; where one is refused, or on the CPU, a is
// recomputed (one pass over x) and the plain wgrad / dgrad and the mask pass run: the composition's
// kernels in the composition's order, so on the CPU the node's values and gradients equal the
// composition's bit for bit (tests/test_conv_bn.cpp), and the CPU with the switch on runs the very
// node (and the same fallbacks) the GPU runs. For f16/bf16 the dgrad graph first tries cuDNN's
// dbn_weight node too (MLPerf's dgrad_drelu_bnbwd_weight): d weight, d bias and the coefficients
// of dx = c1 dz + c2 x + c3 come out of the dgrad's epilogue, and dx is one pass; where refused,
// the dgrad + ReLU-mask graph and batch_norm_apply's backward reductions by tensor ops.
// conv_bn_fusion_stats counts the backward graphs too (a refused dbn_weight graph as a fallback).
// Wiring: ResNet's blocks in training mode with the switch on (layers/models/resnet.cpp):
// conv1 -> conv2d_genstats; every later conv of the block (the tail's included) -> bn_finalize of
// the previous BN (BatchNorm2d::relu_prologue) -> conv2d_bn_relu_genstats; the tail BN keeps
// forward_add_relu (its consumer is the shortcut add, not a conv; the tail conv's statistics go
// unused). The stem keeps conv2d_genstats -> bn_finalize -> batch_norm_apply (a maxpool follows).
// Not built yet (the rest of item 3): dx's pass (c1 dz + c2 x + c3) folded into the previous
// conv's wgrad/dgrad (MLPerf's dconv with a pointwise prologue on dy), and the dbn_weight graph for
// f32 (its engines are for 16-bit data); the stem (maxpool after the BN) and the block tails (BN +
// add + ReLU from statistics) keep their passes. Measure before turning the switch on.
// Never run on a GPU yet: tests/gpu_conv_fusion.cpp pins the graph paths to this reference.
#pragma once
#include <cstdint>

#include "core/ops/conv/types.h"
#include "core/tensor.h"

namespace tandem::ops {

// Per-channel sums of a [N, H, W, C] tensor over N, H and W: the input of bn_finalize.
struct ChannelStats {
  Tensor sum;     // [C]
  Tensor sq_sum;  // [C], sum of squares
  int64_t count = 0;  // N * H * W, the number of values per channel
};

struct ConvGenstats {
  Tensor y;  // [N, OH, OW, O], differentiable (a Conv2dBackward node)
  ChannelStats stats;
};
ConvGenstats conv2d_genstats(const Tensor& x, const Tensor& w, const Conv2dParams& p);

// bn(y) = y * scale + bias per channel, from y's statistics (all [C]).
struct BnFinalized {
  Tensor scale, bias, mean, inv_std;
  int64_t count = 0;  // the statistics' count, for batch_norm_apply's backward
};
// weight/bias may be undefined (no affine: 1 and 0); running_mean/var may be undefined (not
// tracked). Needs count > 1 (the unbiased variance), as batch_norm's training mode. Not recorded
// by autograd (its inputs are statistics, not activations).
BnFinalized bn_finalize(const ChannelStats& stats, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, double momentum = 0.1, double eps = 1e-5);

// a = y * fin.scale + fin.bias per channel, then ReLU when `relu`: BN's training-mode output from
// statistics computed elsewhere (conv2d_genstats -> bn_finalize), with batch_norm's gradients, i.e.
// d/dy through the batch mean and variance as if they had been computed from y here:
//   xhat = (y - mean) inv_std,  dz = da (* [a > 0] with relu: fn::ReluBackward's rule)
//   d bias = sum dz,  d weight = sum dz xhat,  dy = weight inv_std / n (n dz - d bias - xhat d weight)
// (weight 1 without affine). weight/bias are the BN's parameters (autograd inputs); `fin` must come
// from bn_finalize with them. Output in y's dtype; arithmetic in the statistics' dtype. This is the
// reference path (tensor ops, a few passes over y each way); where a conv follows, the switch on
// folds it into that conv's prologue (conv2d_bn_relu_genstats).
Tensor batch_norm_apply(const Tensor& y, const BnFinalized& fin, const Tensor& weight, const Tensor& bias, bool relu);

// A BN + ReLU still to be applied: relu(x * fin.scale + fin.bias), the output of the BN with
// parameters weight and bias (autograd inputs; fin from bn_finalize with them), as the input of
// the conv that follows (conv2d_bn_relu_genstats). BatchNorm2d::relu_prologue makes one.
struct BnReluInput {
  Tensor x;  // the BN's input, [N, H, W, C]: the previous conv's output
  BnFinalized fin;
  Tensor weight, bias;  // may be undefined (no affine), as batch_norm_apply's
};
// conv2d_genstats(batch_norm_apply(in.x, in.fin, in.weight, in.bias, true), w, p) in values and
// gradients; with BackendConfig::conv_bn_fusion on, one node and, on the GPU, one cuDNN graph that
// applies the scale, bias and ReLU as the conv loads x (see the contract above).
ConvGenstats conv2d_bn_relu_genstats(const BnReluInput& in, const Tensor& w, const Conv2dParams& p);

// CUDA calls with BackendConfig::conv_bn_fusion on that ran a graph (fused) or fell back (unfused),
// and whether this build has cuDNN's frontend at all. The GPU tests require no fallback on an H100.
using ConvBnFusionStats = GraphFusionStats;
ConvBnFusionStats conv_bn_fusion_stats();

}  // namespace tandem::ops
