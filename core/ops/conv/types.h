// core/ops/conv/types.h: conv2d's parameters, named by both the op (conv.h) and its kernels
// (kernels.h: ConvGeom carries them), so that the kernel header need not include the op's header.
#pragma once

namespace tandem::ops {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

}  // namespace tandem::ops
