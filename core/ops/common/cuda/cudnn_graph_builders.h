// core/ops/common/cuda/cudnn_graph_builders.h: every cuDNN frontend graph tandem builds, one function
// per graph, from the problem's shapes, dtype and options alone (no tensors, no device). The ops
// (core/ops/conv/cuda_graph.cpp, core/ops/attention/cuda_cudnn_sdpa.cpp) describe their graphs with
// these and lower them with cudnn_graph::lower; tests/cpu_cudnn_graphs.cpp builds the same graphs at
// the models' shapes and validates them (and, from serialised device properties, plans them) on a
// machine without a GPU. Returned graphs are described, not validated; tensor uids are the ops' own.
// target_sm (every builder's last argument): the GPU's SM version (90 = H100) for building without a
// GPU; the ops leave it 0 (the current device's).
// Defined only where the frontend is built in (TANDEM_CUDNN_GRAPHS, cudnn_graph.h): call them from
// code that includes cudnn_graph.h, under that guard. This header itself does not include the
// frontend (~40 s of compile per file).
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/ops/attention/kernels.h"
#include "core/ops/conv/kernels.h"

namespace cudnn_frontend::graph {
class Graph;
}

namespace tandem::kernels::cudnn_builders {

using GraphPtr = std::shared_ptr<cudnn_frontend::graph::Graph>;

// ---- the conv family (core/ops/conv/cuda_graph.cpp; tensors NHWC, filters OHWI, dt = the I/O dtype) ----
// relu(conv(X, W) + B) -> Y; without `has_bias`, relu(conv(X, W)).
GraphPtr conv_bias_relu(const ConvGeom& g, DType dt, bool has_bias, int32_t target_sm = 0);
// conv(X, W) -> Y with genstats(Y) -> SUM, SQ_SUM (f32 [1, o, 1, 1]); with `prologue`, the conv reads
// relu(X * SCALE + BIAS) (the previous BN + ReLU, SCALE and BIAS [1, c, 1, 1] in dt).
GraphPtr conv_genstats(const ConvGeom& g, DType dt, bool prologue, int32_t target_sm = 0);
// conv_wgrad(DY, relu(X * SCALE + BIAS)) -> DW [o, c, kh, kw] (SCALE, BIAS in dt).
GraphPtr conv_bn_relu_wgrad(const ConvGeom& g, DType dt, int32_t target_sm = 0);
// RELU_BWD(conv_dgrad(DY, W), X * SCALE + BIAS) -> DZ [n, c, h, w].
GraphPtr conv_dgrad_drelu(const ConvGeom& g, DType dt, int32_t target_sm = 0);
// The same with the pre-activation in BN's form and dbn_weight after it (16-bit dt only).
GraphPtr conv_dgrad_drelu_dbn(const ConvGeom& g, DType dt, int32_t target_sm = 0);
// bn_finalize over c channels (all f32) with the count, eps and momentum as graph constants.
GraphPtr bn_finalize(int64_t c, int64_t count, double eps, double momentum, int32_t target_sm = 0);

// ---- cuDNN SDPA (core/ops/attention/cuda_cudnn_sdpa.cpp; the problem as kernels.h's SdpaArgs) ----
GraphPtr sdpa_forward(const SdpaArgs& a, int32_t target_sm = 0);
GraphPtr sdpa_backward(const SdpaArgs& a, int32_t target_sm = 0);

}  // namespace tandem::kernels::cudnn_builders
