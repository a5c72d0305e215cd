// core/ops/conv/cpu_onednn.h: the oneDNN CPU convolution (internal; cpu_onednn.cpp).
//
// Same layouts and overwrite (=) semantics as the im2col reference in kernels.h. Each call returns
// false, having written nothing, where oneDNN does not take the problem: built without oneDNN,
// BackendConfig::cpu_onednn off, a dtype other than f32/bf16, an empty tensor, or a problem oneDNN
// has no implementation for. The reference's entry points (cpu.cpp) try these first.
#pragma once
#include "core/ops/conv/kernels.h"

namespace tandem::kernels {

bool onednn_built();  // whether this build has oneDNN (TANDEM_HAVE_ONEDNN)
bool conv2d_forward_onednn(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y);
bool conv2d_backward_data_onednn(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx);
// The selection rule's one exception, measured: false where the reference's backward filter beat
// oneDNN's (2x2 output maps or smaller, and 4x4 ones with a 512 x 3 x 3 window; cpu_onednn.cpp says
// why), so cpu.cpp runs the reference there.
bool onednn_preferred_for_backward_filter(const ConvGeom& g);
// Whether the primitive for this problem (forward and backward data, or backward filter) runs on
// oneDNN's own blocked activation layout, the NHWC tensors reordered to it and back per call, rather
// than on NHWC directly (cpu_onednn.cpp says where and why: small images with many channels).
bool onednn_blocked_activations(const ConvGeom& g, bool backward_filter);
bool conv2d_backward_filter_onednn(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw);

}  // namespace tandem::kernels
