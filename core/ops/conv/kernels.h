// core/ops/conv/kernels.h: backend entry points for 2-D convolution (internal).
//
// Layouts: x [N, H, W, C] (NHWC), w [O, KH, KW, C/groups] (OHWI), y [N, OH, OW, O]. Cross-
// correlation (no kernel flip), as in every DL framework. Group g reads input channels
// [g C/groups, (g+1) C/groups) and writes output channels [g O/groups, (g+1) O/groups).
// The op layer (core/ops/conv/conv.cpp) validates shapes and fills ConvGeom; these functions only
// compute. Every output is overwritten (=), never accumulated into, except by
// conv2d_backward_data_accumulate_cuda: dx += dgrad (cuDNN's beta = 1), for autograd's pending
// gradient (core/ops/conv/conv.cpp); it returns false, having written nothing, where no engine takes
// beta = 1 for the problem (the caller then computes dx fresh and adds it).
// Bias: conv2d_forward_bias_cuda fuses it into cuDNN's graph where an engine takes it and returns
// false where none does (y must then be recomputed: conv.cpp runs the plain forward and the
// broadcast add, as it does everywhere else).
#pragma once
#include <cstdint>

#include "core/ops/conv/types.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct ConvGeom {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t o = 0, kh = 0, kw = 0;       // filter (its channel count is c / groups)
  int64_t oh = 0, ow = 0;              // output spatial size
  ops::Conv2dParams p;
};

void conv2d_forward_cpu(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y);
void conv2d_backward_data_cpu(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx);
void conv2d_backward_filter_cpu(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw);
#ifdef TANDEM_WITH_CUDA
void conv2d_forward_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y);
bool conv2d_forward_bias_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// relu(conv(x, w) + b) as one cuDNN frontend graph (core/ops/conv/cuda_graph.cpp; b may be undefined).
// False, with y untouched or garbage, when the frontend is not built in or no engine takes the graph:
// the caller then computes y its other way (conv.cpp).
bool conv2d_forward_bias_relu_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                         Tensor& y);
// Conv-BN fusion (core/ops/conv_bn/conv_bn.h), also in cuda_graph.cpp. False: refused, outputs
// untouched or garbage, the caller computes them its other way.
// y = conv(x, w) with y's per-channel sum and sum of squares (f32 [O]) from the conv's epilogue.
bool conv2d_forward_genstats_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y, Tensor& sum,
                                        Tensor& sq_sum);
// The same with a prologue: y = conv(relu(x * scale + bias), w), scale and bias f32 [C] (the previous
// BN's bn_finalize terms; cast to x's dtype for the graph, which cuDNN's engines need) applied as the
// conv loads x, which is all that is read of it.
bool conv2d_forward_bn_relu_genstats_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& scale,
                                                const Tensor& bias, const Tensor& w, Tensor& y, Tensor& sum,
                                                Tensor& sq_sum);
// Its backward: dw = wgrad(relu(x * scale + bias), dy), the prologue applied as the wgrad loads x;
// and dz = dgrad(dy, w) masked where x * scale + bias <= 0 (the ReLU's backward), in dy's dtype.
bool conv2d_backward_filter_bn_relu_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& scale,
                                               const Tensor& bias, const Tensor& dy, Tensor& dw);
bool conv2d_backward_data_drelu_graph_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, const Tensor& x,
                                           const Tensor& scale, const Tensor& bias, Tensor& dz);
// The same dz with the BN backward's reductions from the same graph (cuDNN's dbn_weight; f16/bf16
// only): d weight = sum dz xhat, d bias = sum dz, and the per-channel coefficients of the BN input's
// gradient dx = eq_scale_dy dz + eq_scale_x x + eq_bias. All [C] f32; mean, inv_std from bn_finalize.
struct BnBackwardIn {
  const Tensor &mean, &inv_std, &weight, &bias;
};
struct BnBackwardOut {
  Tensor &dweight, &dbias, &eq_scale_dy, &eq_scale_x, &eq_bias;
};
bool conv2d_backward_data_drelu_dbn_graph_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, const Tensor& x,
                                               const BnBackwardIn& bn, Tensor& dz, const BnBackwardOut& out);
// BN's training-mode terms from the sums (all f32 [C]); the next running stats go to fresh tensors.
struct BnFinalizeIn {
  const Tensor &sum, &sq_sum, &weight, &bias, &running_mean, &running_var;
  int64_t count;
  double momentum, eps;
};
struct BnFinalizeOut {
  Tensor &scale, &bias, &mean, &inv_std, &next_running_mean, &next_running_var;
};
bool bn_finalize_graph_cuda(const BnFinalizeIn& in, const BnFinalizeOut& out);
bool conv_graphs_built();  // whether cuda_graph.cpp was compiled with the frontend
// The stderr note a fused conv graph's first fallback prints (callers keep their own once-flag):
// "cuDNN <graph> not available for <problem> (<why>): <instead> instead".
void note_conv_fallback(const ConvGeom& g, DType dt, const char* graph, const char* instead, const char* why);
void conv2d_backward_data_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx);
bool conv2d_backward_data_accumulate_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx);
void conv2d_backward_filter_cuda(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw);
#endif

}  // namespace tandem::kernels
