// core/ops/conv/conv.cpp: shape checks, backend dispatch and autograd for conv2d.
//
// The conv node saves x and w (detached) and computes, on demand, dx (backward data) and dw
// (backward filter) through the backend. The bias [O] (NHWC makes it the innermost dim) is added
// by cuDNN's fused conv + bias graph on CUDA where an engine takes it (BackendConfig::
// conv_bias_fusion, conv.h), else in place into the conv output (ops::add_, a vectorised broadcast on CUDA) inside the
// same op, so there is no second activation-sized tensor and no separate add node either way; its
// gradient is the column sum of dy (sum_to_trailing: a 2-D partials + finish reduction on CUDA).
// dx adds into the gradient already pending for x when autograd offers one (autograd::
// pending_gradient: x also feeds another branch, as a ResNet block's input feeds its shortcut):
// cuDNN's backward data with beta = 1 on CUDA, so the engine's separate add pass disappears. The
// CPU computes dx and adds it in (ops::add_): the engine's order, so the engine's bits; so does a
// CUDA problem for which no beta = 1 plan exists.
// conv2d_bias_relu (conv.h) is the same op with ReLU as its tail: one cuDNN graph forward where
// the frontend takes it (kernels::conv2d_forward_bias_relu_graph_cuda), else the conv and one
// in-place bias+ReLU pass; its node masks dy and sums the bias gradient in one pass before the
// same dgrad and wgrad.
#include "core/ops/conv/conv.h"
#include "core/ops/conv/conv_with.h"

#include <atomic>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/conv/kernels.h"
#include "core/ops/fused_bias/kernels.h"

namespace tandem::ops {
namespace {

std::atomic<int64_t> g_bias_fused{0}, g_bias_unfused{0};           // conv_bias_fusion_stats
std::atomic<int64_t> g_dgrad_in_kernel{0}, g_dgrad_added{0};       // conv_dgrad_accumulate_stats
std::atomic<int64_t> g_relu_fused{0}, g_relu_unfused{0};           // conv_bias_relu_stats

kernels::ConvGeom geometry(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  TANDEM_CHECK(x.dim() == 4, "conv2d: input must be NHWC [N, H, W, C], got ", shape_str(x.shape()));
  TANDEM_CHECK(w.dim() == 4, "conv2d: weight must be OHWI [O, KH, KW, C/groups], got ", shape_str(w.shape()),
               " (convert PyTorch's OIHW when loading checkpoints)");
  TANDEM_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 && p.pad_h >= 0 &&
                   p.pad_w >= 0 && p.groups >= 1,
               "conv2d: stride and dilation must be >= 1, padding >= 0 and groups >= 1");
  kernels::ConvGeom g;
  g.n = x.size(0), g.h = x.size(1), g.w = x.size(2), g.c = x.size(3);
  g.o = w.size(0), g.kh = w.size(1), g.kw = w.size(2);
  g.p = p;
  TANDEM_CHECK(g.c % p.groups == 0 && g.o % p.groups == 0, "conv2d: groups = ", p.groups,
               " must divide both input channels (", g.c, ") and output channels (", g.o, ")");
  TANDEM_CHECK(w.size(3) == g.c / p.groups, "conv2d: weight ", shape_str(w.shape()), " must have C/groups = ",
               g.c / p.groups, " input channels for input ", shape_str(x.shape()), " with groups = ", p.groups);
  g.oh = (g.h + 2 * p.pad_h - p.dilation_h * (g.kh - 1) - 1) / p.stride_h + 1;
  g.ow = (g.w + 2 * p.pad_w - p.dilation_w * (g.kw - 1) - 1) / p.stride_w + 1;
  TANDEM_CHECK(g.oh >= 1 && g.ow >= 1 && g.h + 2 * p.pad_h >= p.dilation_h * (g.kh - 1) + 1 &&
                   g.w + 2 * p.pad_w >= p.dilation_w * (g.kw - 1) + 1,
               "conv2d: the (dilated) kernel ", g.kh, "x", g.kw, " does not fit the padded input ", g.h, "x", g.w,
               ": increase padding or use a smaller kernel");
  return g;
}

Tensor backward_data(const kernels::ConvGeom& g, const Tensor& dy, const Tensor& w) {
  const Shape shape{g.n, g.h, g.w, g.c};
  Tensor pending = autograd::pending_gradient(0, shape, dy.dtype(), dy.device());  // x is input 0
  bool accumulated = false;
#ifdef TANDEM_WITH_CUDA
  if (pending.defined() && dy.is_cuda())
    TANDEM_BACKEND(dy, (void)0, accumulated = kernels::conv2d_backward_data_accumulate_cuda(g, dy, w, pending));
#endif
  if (accumulated) {
    g_dgrad_in_kernel.fetch_add(1);
    return pending;
  }
  Tensor dx = Tensor::empty(shape, dy.dtype(), dy.device());
  TANDEM_BACKEND(dy, kernels::conv2d_backward_data_cpu(g, dy, w, dx), kernels::conv2d_backward_data_cuda(g, dy, w, dx));
  if (!pending.defined()) return dx;
  add_(pending, dx);  // pending + dx, as the engine would add them
  g_dgrad_added.fetch_add(1);
  return pending;
}

Tensor backward_filter(const kernels::ConvGeom& g, const Tensor& x, const Tensor& dy) {
  Tensor dw = Tensor::empty({g.o, g.kh, g.kw, g.c / g.p.groups}, dy.dtype(), dy.device());
  TANDEM_BACKEND(dy, kernels::conv2d_backward_filter_cpu(g, x, dy, dw),
                 kernels::conv2d_backward_filter_cuda(g, x, dy, dw));
  return dw;
}

}  // namespace

ConvBiasFusionStats conv_bias_fusion_stats() { return {g_bias_fused.load(), g_bias_unfused.load()}; }
ConvDgradAccumulateStats conv_dgrad_accumulate_stats() { return {g_dgrad_in_kernel.load(), g_dgrad_added.load()}; }
GraphFusionStats graph_fusion_stats(int64_t fused, int64_t unfused) {
  GraphFusionStats s{fused, unfused, false};
#ifdef TANDEM_WITH_CUDA
  s.frontend = kernels::conv_graphs_built();
#endif
  return s;
}
ConvBiasReluStats conv_bias_relu_stats() { return graph_fusion_stats(g_relu_fused.load(), g_relu_unfused.load()); }

namespace {

// conv2d and conv2d_bias_relu: y = conv(x, w) [+ b] [then ReLU], one node either way.
Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p, bool relu,
                    const ConvFusedForward* fused = nullptr) {
  const char* op = relu ? "conv2d_bias_relu" : "conv2d";
  check_same_device(x, w, op);
  check_same_dtype(x, w, op);
  TANDEM_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", dtype_name(x.dtype()));
  TANDEM_CHECK(!(x.is_cuda() && x.dtype() == DType::F64), op,
               ": f64 exists for CPU gradient checks only; cast to f32/bf16/f16 for CUDA");
  kernels::ConvGeom g = geometry(x, w, p);
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.o}, x.dtype(), x.device());
  if (b.defined()) {
    check_same_device(x, b, op);
    check_same_dtype(x, b, op);
    check_shape(b, {g.o}, op, "bias");
  }
  const bool fuse = x.is_cuda() && backend().conv_bias_fusion;
  bool done = fused && (*fused)(g, y);  // y holds the whole result (bias and ReLU included)
#ifdef TANDEM_WITH_CUDA
  if (!done && fuse && relu) {  // one cuDNN graph: conv -> + b -> ReLU (core/ops/conv/cuda_graph.cpp)
    TANDEM_BACKEND(x, (void)0, done = kernels::conv2d_forward_bias_relu_graph_cuda(g, x, w, b, y));
    (done ? g_relu_fused : g_relu_unfused).fetch_add(1);
  }
#endif
  if (!done) {
    bool bias_done = false;
#ifdef TANDEM_WITH_CUDA
    if (fuse && b.defined())  // TANDEM_BACKEND: for TANDEM_SYNC_CHECK
      TANDEM_BACKEND(x, (void)0, bias_done = kernels::conv2d_forward_bias_cuda(g, x, w, b, y));
#endif
    if (fuse && b.defined()) (bias_done ? g_bias_fused : g_bias_unfused).fetch_add(1);
    if (!bias_done)
      TANDEM_BACKEND(x, kernels::conv2d_forward_cpu(g, x, w, y), kernels::conv2d_forward_cuda(g, x, w, y));
    // y is ours and not yet in any graph: the tails run in place, one pass each at most.
    if (relu) {
      // The bias still to add, or (added by cuDNN, or none) a zero bias: the ReLU alone, still one pass.
      const Tensor tail_bias = b.defined() && !bias_done ? b : Tensor::zeros({g.o}, x.dtype(), x.device());
      TANDEM_BACKEND(x, kernels::bias_relu_cpu(y, tail_bias, y), kernels::bias_relu_cuda(y, tail_bias, y));
    } else if (b.defined() && !bias_done) {
      add_(y, b);
    }
  }

  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  if (!relu) {
    autograd::record("Conv2dBackward", {x, w, b}, y,
                     [g, x = gw ? x.detach() : Tensor(), w = gx ? w.detach() : Tensor(), gx, gw,
                      gb](std::vector<Tensor>& gr) {
                       return std::vector<Tensor>{gx ? backward_data(g, gr[0], w) : Tensor(),
                                                  gw ? backward_filter(g, x, gr[0]) : Tensor(),
                                                  gb ? sum_to_trailing(gr[0], {g.o}) : Tensor()};
                     });
    return y;
  }
  // y.detach(): the node keeps the output's data for the mask without owning y's handle (which
  // holds the node: no cycle). Nothing overwrites y later (relu_'s contract is the same).
  autograd::record("Conv2dBiasReluBackward", {x, w, b}, y,
                   [g, x = gw ? x.detach() : Tensor(), w = gx ? w.detach() : Tensor(), y = y.detach(), gx, gw,
                    gb](std::vector<Tensor>& gr) {
                     const Tensor& dy = gr[0];
                     Tensor dz = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
                     Tensor db = gb ? Tensor::empty({g.o}, dy.dtype(), dy.device()) : Tensor();
                     TANDEM_BACKEND(dy, kernels::relu_bias_backward_cpu(dy, y, dz, db),
                                    kernels::relu_bias_backward_cuda(dy, y, dz, db));
                     return std::vector<Tensor>{gx ? backward_data(g, dz, w) : Tensor(),
                                                gw ? backward_filter(g, x, dz) : Tensor(), db};
                   });
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  return conv_forward(x, w, b, p, /*relu=*/false);
}

Tensor conv2d_bias_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  return conv_forward(x, w, b, p, /*relu=*/true);
}

Tensor conv2d_with(const Tensor& x, const Tensor& w, const Conv2dParams& p, const ConvFusedForward& fused) {
  return conv_forward(x, w, Tensor(), p, /*relu=*/false, &fused);
}

}  // namespace tandem::ops
