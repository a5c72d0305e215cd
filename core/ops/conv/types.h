// core/ops/conv/types.h: conv2d's parameters, named by both the op (conv.h) and its kernels
// (kernels.h: ConvGeom carries them), so that the kernel header need not include the op's header;
// and the fused-graph counters the conv family's ops report.
#pragma once
#include <cstdint>

namespace tandem::ops {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

// How many CUDA calls of an op with a fused cuDNN graph ran the graph and how many fell back (graph
// refused or failed; the first is noted once on stderr), and whether this build has cuDNN's
// frontend at all: conv_bias_relu_stats (conv.h), conv_bn_fusion_stats (conv_bn/conv_bn.h).
struct GraphFusionStats {
  int64_t fused = 0;
  int64_t unfused = 0;
  bool frontend = false;  // TANDEM_HAVE_CUDNN_FRONTEND 1 and CUDA on
};

}  // namespace tandem::ops
