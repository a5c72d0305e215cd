// core/ops/conv.h: 2-D convolution on NHWC activations (im2col + GEMM on CPU, cuDNN on CUDA).
//
// Internal weight layout is OHWI: [out_channels, kernel_h, kernel_w, in_channels / groups], the
// layout cuDNN wants next to NHWC activations (tensor-core friendly). Checkpoints convert to and
// from PyTorch's OIHW (see layers/ and the checkpoint code); nothing else sees OIHW.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

// x [N, H, W, C], w [O, KH, KW, C/groups], b [O] or undefined -> [N, OH, OW, O]
// OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1, likewise OW.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);

// cuDNN engine choice (CUDA only; process-wide, read when a shape's plan is first built, and part
// of the plan-cache key, so changing them mid-run builds new plans rather than reusing old ones).
// Deterministic: skip engines that cuDNN marks NONDETERMINISTIC (split reductions with atomics,
// mostly in backward filter), so that two runs with the same inputs give the same bits.
// Default off (PyTorch's cudnn.deterministic = False); train_imagenet --deterministic turns it on.
void set_deterministic(bool on);
bool deterministic();
// The largest workspace one conv plan may ask for, in bytes; engines that need more are skipped.
// Default 1 GiB: enough for the fast implicit-GEMM and Winograd engines on ImageNet shapes, while
// the FFT engines that can ask for several GiB would take memory the activations need (workspaces
// come from the same stream-ordered pool).
void set_conv_workspace_limit(int64_t bytes);
int64_t conv_workspace_limit();

}  // namespace tandem::ops
