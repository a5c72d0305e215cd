// tests/support/conv_params.h: the conv2d parameters the conv tests spell as one call.
//
// conv_params(stride, pad, dilation, groups) gives the same stride, padding and dilation on both
// axes, which is every case the gradient checks and the parity tests exercise.
#pragma once
#include "core/ops/conv/conv.h"

namespace tandem::testing {

inline ops::Conv2dParams conv_params(int stride, int pad, int dilation, int groups) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  p.dilation_h = p.dilation_w = dilation;
  p.groups = groups;
  return p;
}

}  // namespace tandem::testing
