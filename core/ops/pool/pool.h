// core/ops/pool/pool.h: pooling on NHWC activations.
//
// Semantics match torch.nn.functional: max pooling ignores padding (padded cells never win),
// average pooling counts padding cells when count_include_pad (PyTorch's default), ceil_mode picks
// the output-size rounding. Max-pool backward routes each gradient to the first maximum in the
// window (row-major), so ties are deterministic on both backends. NaN as in PyTorch: a window that
// holds a NaN outputs NaN, and its last NaN (row-major) gets the gradient (pool::max_takes).
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg only
};

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);   // [N, H, W, C] -> [N, OH, OW, C]
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
// torch.nn.AdaptiveAvgPool2d((oh, ow)): window i spans [floor(i H / oh), ceil((i+1) H / oh)).
Tensor adaptive_avg_pool2d(const Tensor& x, int out_h, int out_w);
// [N, H, W, C] -> [N, C]: the mean over H and W.
Tensor global_avg_pool(const Tensor& x);

}  // namespace tandem::ops
