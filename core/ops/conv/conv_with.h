// core/ops/conv/conv_with.h: conv2d (no bias) whose forward another op family computes, for the
// fused graphs that write side outputs next to y (conv2d_genstats, core/ops/conv_bn/conv_bn.h:
// the BN batch statistics in the conv's epilogue), and the fused-graph counters' constructor.
// Internal to core/ops.
//
// `fused` gets the checked geometry and the fresh output y; it returns true when it wrote y, false
// to let the plain conv run (a refused graph, a CPU tensor, a switch that is off). Either way the
// result carries the one ordinary Conv2dBackward node (dgrad, wgrad), so y's gradient is conv2d's.
#pragma once
#include <functional>

#include "core/ops/conv/kernels.h"
#include "core/tensor.h"

namespace tandem::ops {

using ConvFusedForward = std::function<bool(const kernels::ConvGeom& g, Tensor& y)>;
Tensor conv2d_with(const Tensor& x, const Tensor& w, const Conv2dParams& p, const ConvFusedForward& fused);

// A GraphFusionStats from an op's two counters, with `frontend` filled in for this build.
GraphFusionStats graph_fusion_stats(int64_t fused, int64_t unfused);

}  // namespace tandem::ops
