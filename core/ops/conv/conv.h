// core/ops/conv/conv.h: 2-D convolution on NHWC activations (im2col + GEMM on CPU, cuDNN on CUDA).
//
// Internal weight layout is OHWI: [out_channels, kernel_h, kernel_w, in_channels / groups], the
// layout cuDNN wants next to NHWC activations (tensor-core friendly). Checkpoints convert to and
// from PyTorch's OIHW (see layers/ and the checkpoint code); nothing else sees OIHW.
#pragma once
#include "core/ops/conv/types.h"  // defines: Conv2dParams
#include "core/tensor.h"

namespace tandem::ops {

// x [N, H, W, C], w [O, KH, KW, C/groups], b [O] or undefined -> [N, OH, OW, O]
// OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1, likewise OW.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);

// cuDNN engine choice (CUDA only) follows core/backend.h's BackendConfig: deterministic engines
// only (deterministic), TF32 (allow_tf32), the workspace limit (conv_workspace_limit) and the
// bias fusion below (conv_bias_fusion), read when a shape's plan is first built and part of the
// plan-cache key, so a change builds new plans rather than reusing old ones.
// Forward bias in cuDNN's graph (CUDA): conv and a pointwise bias ADD as one fused graph, so y is
// written once instead of written, read and written again by a separate broadcast add (for VGG16 at
// batch 64, 224 px, ~7 GB of traffic per step, ~2.5 ms on an H100). Only cuDNN's runtime-fusion
// engines take that graph: the first call per shape compiles a kernel (NVRTC, part of init time),
// and shapes or dtypes without a fused engine (or whose fused plan fails) fall back, remembered per
// shape, to the plain conv plus the broadcast add. Same values either way up to f32 summation order:
// the bias is added in f32 before the one rounding to y's dtype. Default on; off restores the
// separate add (BackendConfig::conv_bias_fusion). Backward is unchanged (the bias gradient is a
// column sum of dy). ResNet's convs have no bias, so only VGG/AlexNet see it. Not yet timed on a
// GPU: bench_ops prints both.
// Linear layers need no switch: ops::linear already uses cuBLASLt's BIAS / BGRADB epilogues.
// How many CUDA conv2d calls with a bias (fusion on) ran the fused graph, and how many fell back
// to the plain conv + add (the first fallback is also noted once on stderr). The GPU tests read it
// so that a parity pass of the "fused" path cannot come from the fallback unnoticed.
struct ConvBiasFusionStats {
  int64_t fused = 0;
  int64_t unfused = 0;
};
ConvBiasFusionStats conv_bias_fusion_stats();

// How many conv2d backward-data calls added dx into a gradient autograd had pending for the input
// (autograd::pending_gradient, BackendConfig::fused_grad_accumulation): in the kernel (cuDNN's
// beta = 1), or by computing dx and adding it (the CPU, or a CUDA problem without a beta = 1 plan).
// The GPU tests read it, so that "no separate add" cannot pass while the add still runs.
struct ConvDgradAccumulateStats {
  int64_t in_kernel = 0;
  int64_t added = 0;
};
ConvDgradAccumulateStats conv_dgrad_accumulate_stats();
// relu(conv2d(x, w, b, p)) as one op: VGG's and AlexNet's Conv2d -> ReLU pairs (layers/conv2d.cpp,
// Conv2d::forward_relu). b may be undefined (then relu(conv2d(x, w))). Same values and gradients as
// the composition, which the CPU runs as the reference: ReLU is fn::Relu (NaN stays NaN, relu(0) =
// +0) and its gradient fn::ReluBackward (0 where y <= 0, the subgradient 0 at 0, as PyTorch).
// Forward on CUDA (BackendConfig::conv_bias_fusion on and cuDNN's frontend built in): ONE cuDNN
// graph, conv_fprop -> pointwise ADD (bias broadcast per channel) -> pointwise RELU_FWD, so y is
// written once; the conv, the bias add and the ReLU would otherwise be 1 + 2 + 2 passes over y (for
// VGG16 at batch 128 the first conv's y alone is 822 MB in bf16). Where the frontend is absent, the
// graph is refused, or the switch is off: the conv (with the fused bias where conv2d would fuse it)
// and then one in-place bias+ReLU pass (kernels::bias_relu_*), never a separate ReLU tensor.
// Backward: dz = dy where y > 0 and the bias gradient db = column sums of dz come out of ONE pass
// (kernels::relu_bias_backward_*, fused_bias's column reduction: no separate column-sum pass over dz,
// which the unfused relu -> conv2d backward makes), then cuDNN's dgrad and wgrad read dz.
// Not fused (left for a cross-layer pass): cuDNN's dgrad + drelu epilogue applies the *previous*
// layer's ReLU mask to this layer's dx (the frontend's "Dgrad Drelu" sample); it pays only when the
// previous layer's node then skips its own mask, which autograd's per-op nodes cannot arrange.
// Saved for backward: x and w (as conv2d) and y (for the mask; y is the op's output, so no extra memory).
Tensor conv2d_bias_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);

// CUDA conv2d_bias_relu calls (fusion on) that ran the one-graph forward, and those that fell back
// (frontend absent, graph refused, or its execution failed; the first is noted once on stderr). The
// GPU tests require fallback 0 on an H100 for VGG's and AlexNet's shapes.
using ConvBiasReluStats = GraphFusionStats;
ConvBiasReluStats conv_bias_relu_stats();

}  // namespace tandem::ops
