// core/ops/conv_bn/conv_bn.cpp: conv2d_genstats and bn_finalize (see conv_bn.h): the cuDNN graphs
// when BackendConfig::conv_bn_fusion is on (core/ops/conv/cuda_graph.cpp, the conv family's one
// frontend file), else the reference below, written with tensor ops so that it runs unchanged on
// both backends. Scalars (1/n, eps, momentum) enter as full tensors of the statistics' dtype, not
// as the f32 `alpha` of the scalar ops, so the f64 reference is exact to f64 rounding.
#include "core/ops/conv_bn/conv_bn.h"

#include <algorithm>
#include <atomic>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/conv/conv_with.h"
#include "core/ops/conv/kernels.h"
#include "core/ops/copy/copy.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/fused_bias/kernels.h"

namespace tandem::ops {
namespace {

std::atomic<int64_t> g_fused{0}, g_unfused{0};  // conv_bn_fusion_stats

bool fusion_on(const Tensor& t) { return t.is_cuda() && backend().conv_bn_fusion; }
void count(bool fused) { (fused ? g_fused : g_unfused).fetch_add(1); }

DType stats_dtype(DType activation) { return activation == DType::F64 ? DType::F64 : DType::F32; }

// A [C] tensor of `value`, the dtype and device of `like`.
Tensor filled(const Tensor& like, double value) { return Tensor::full(like.shape(), value, like.dtype(), like.device()); }

// The statistics' reference: the sums of y as stored (rounded to its dtype), in the stats dtype.
ChannelStats reference_stats(const Tensor& y, DType activation) {
  autograd::NoGradGuard no_grad;
  ChannelStats st;
  Tensor yv = cast(y.detach(), stats_dtype(activation));
  st.sum = sum_to_trailing(yv, {y.size(-1)});
  st.sq_sum = sum_to_trailing(mul(yv, yv), {y.size(-1)});
  st.count = y.numel() / std::max<int64_t>(y.size(-1), 1);
  return st;
}

}  // namespace

ConvBnFusionStats conv_bn_fusion_stats() { return graph_fusion_stats(g_fused.load(), g_unfused.load()); }

ConvGenstats conv2d_genstats(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  ConvGenstats out;
  bool graph = false;
  const bool fuse = fusion_on(x);
  ConvFusedForward fused = [&](const kernels::ConvGeom& g, Tensor& y) {
#ifdef TANDEM_WITH_CUDA
    if (!fuse) return false;
    out.stats.sum = Tensor::empty({g.o}, DType::F32, y.device());
    out.stats.sq_sum = Tensor::empty({g.o}, DType::F32, y.device());
    TANDEM_BACKEND(x, (void)0,
                   graph = kernels::conv2d_forward_genstats_graph_cuda(g, x, w, y, out.stats.sum, out.stats.sq_sum));
#else
    (void)g, (void)y;
#endif
    return graph;
  };
  out.y = conv2d_with(x, w, p, fused);
  if (fuse) count(graph);
  if (!graph) out.stats = reference_stats(out.y, x.dtype());
  const Shape& s = out.y.shape();
  out.stats.count = s[0] * s[1] * s[2];
  return out;
}

BnFinalized bn_finalize(const ChannelStats& st, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps) {
  TANDEM_CHECK(st.sum.defined() && st.sq_sum.defined() && st.sum.dim() == 1 && st.sq_sum.shape() == st.sum.shape(),
               "bn_finalize: sum and sq_sum must be [C] tensors (conv2d_genstats's statistics)");
  TANDEM_CHECK(st.count > 1, "bn_finalize: training-mode batch norm needs more than one value per channel, got ",
               st.count, " (use a larger batch or eval mode)");
  TANDEM_CHECK(momentum >= 0 && momentum <= 1 && eps > 0, "bn_finalize: momentum must be in [0, 1] and eps > 0, got ",
               momentum, " and ", eps);
  for (const Tensor* t : {&weight, &bias, static_cast<const Tensor*>(&running_mean), static_cast<const Tensor*>(&running_var)})
    if (t->defined())
      TANDEM_CHECK(t->shape() == st.sum.shape() && t->dtype() == st.sum.dtype() && t->device() == st.sum.device(),
                   "bn_finalize: weight, bias and running stats must match the statistics (", st.sum.str(), "), got ",
                   t->str());
  autograd::NoGradGuard no_grad;
  BnFinalized out;
  out.count = st.count;
  // The graph takes the ResNet case (affine, running stats tracked); the rest is the reference's.
  const bool fuse = fusion_on(st.sum) && weight.defined() && bias.defined() && running_mean.defined() &&
                    running_var.defined();
  bool graph = false;
#ifdef TANDEM_WITH_CUDA
  if (fuse) {
    for (Tensor* t : {&out.scale, &out.bias, &out.mean, &out.inv_std})
      *t = Tensor::empty(st.sum.shape(), st.sum.dtype(), st.sum.device());
    Tensor next_mean = Tensor::empty(st.sum.shape(), st.sum.dtype(), st.sum.device());
    Tensor next_var = Tensor::empty(st.sum.shape(), st.sum.dtype(), st.sum.device());
    TANDEM_BACKEND(st.sum, (void)0,
                   graph = kernels::bn_finalize_graph_cuda({st.sum, st.sq_sum, weight, bias, running_mean, running_var,
                                                            st.count, momentum, eps},
                                                           {out.scale, out.bias, out.mean, out.inv_std, next_mean,
                                                            next_var}));
    if (graph) {  // the graph writes new running stats; the module's buffers keep their storage
      running_mean.copy_(next_mean);
      running_var.copy_(next_var);
    }
  }
#endif
  if (fuse) count(graph);
  if (graph) return out;

  const double n = static_cast<double>(st.count);
  out.mean = mul(st.sum, filled(st.sum, 1.0 / n));
  Tensor var = sub(mul(st.sq_sum, filled(st.sum, 1.0 / n)), mul(out.mean, out.mean));  // biased
  out.inv_std = pow(add(var, filled(var, eps)), -0.5f);
  out.scale = weight.defined() ? mul(weight, out.inv_std) : out.inv_std;
  Tensor shift = mul(out.mean, out.scale);
  out.bias = bias.defined() ? sub(bias, shift) : mul(shift, filled(shift, -1.0));
  if (running_mean.defined())
    running_mean.copy_(add(mul(running_mean, filled(running_mean, 1.0 - momentum)), mul(out.mean, filled(var, momentum))));
  if (running_var.defined())
    running_var.copy_(add(mul(running_var, filled(running_var, 1.0 - momentum)),
                          mul(var, filled(var, momentum * n / (n - 1.0)))));
  return out;
}

namespace {

// relu?(y * fin.scale + fin.bias) in y's dtype, not recorded: batch_norm_apply's forward, and the
// prologue that conv2d_bn_relu_genstats applies (and recomputes in its backward).
Tensor apply_affine(const Tensor& y, const BnFinalized& fin, bool relu) {
  autograd::NoGradGuard no_grad;
  Tensor s = mul(cast(y.detach(), fin.scale.dtype()), fin.scale);
  if (relu)  // + bias and ReLU in one pass, in place
    TANDEM_BACKEND(s, kernels::bias_relu_cpu(s, fin.bias, s), kernels::bias_relu_cuda(s, fin.bias, s));
  else
    add_(s, fin.bias);
  return cast(s, y.dtype());
}

struct ApplyGrads {
  Tensor dy, dweight, dbias;
};
// batch_norm_apply's backward (the formulas in conv_bn.h) from da, the gradient at its output a
// (kept or recomputed: the ReLU mask reads it), or, with `masked`, from dz = da * [a > 0] already
// (a is then not read). dy only when `gy`.
ApplyGrads apply_backward(const Tensor& da_in, const Tensor& y, const Tensor& a, const BnFinalized& fin,
                          const Tensor& weight, bool relu, bool gy, bool masked = false) {
  autograd::NoGradGuard no_grad;
  const DType sd = fin.scale.dtype();
  const int64_t c = y.size(-1);
  Tensor da = cast(da_in, sd);
  ApplyGrads r;
  Tensor dz = da;
  if (relu && !masked) {  // the mask and d bias in one pass (fused_bias's column reduction)
    dz = Tensor::empty(da.shape(), sd, da.device());
    r.dbias = Tensor::empty({c}, sd, da.device());
    Tensor av = cast(a, sd);
    TANDEM_BACKEND(da, kernels::relu_bias_backward_cpu(da, av, dz, r.dbias),
                   kernels::relu_bias_backward_cuda(da, av, dz, r.dbias));
  } else {
    r.dbias = sum_to_trailing(da, {c});
  }
  Tensor xhat = mul(sub(cast(y, sd), fin.mean), fin.inv_std);
  r.dweight = sum_to_trailing(mul(dz, xhat), {c});
  if (gy) {
    const double n = static_cast<double>(fin.count);
    Tensor k = mul(weight.defined() ? weight : filled(fin.inv_std, 1.0), fin.inv_std);
    k = mul(k, filled(k, 1.0 / n));
    Tensor inner = sub(sub(mul(dz, filled(r.dbias, n)), r.dbias),  // [C] operands broadcast over rows
                       mul(xhat, r.dweight));
    r.dy = cast(mul(inner, k), y.dtype());
  }
  return r;
}

void check_apply(const Tensor& y, const BnFinalized& fin, const char* op) {
  TANDEM_CHECK(y.dim() >= 2 && fin.scale.defined() && y.size(-1) == fin.scale.numel() && fin.count > 1, op, ": y ",
               y.str(), " needs bn_finalize's per-channel terms for its last dim");
  TANDEM_CHECK(y.device() == fin.scale.device(), op, ": y and the BN terms must share a device");
}

}  // namespace

Tensor batch_norm_apply(const Tensor& y, const BnFinalized& fin, const Tensor& weight, const Tensor& bias, bool relu) {
  check_apply(y, fin, "batch_norm_apply");
  Tensor a = apply_affine(y, fin, relu);
  const bool gy = y.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  autograd::record("BatchNormApplyBackward", {y, weight, bias}, a,
                   [y = y.detach(), a = a.detach(), fin, weight = weight.defined() ? weight.detach() : Tensor(), relu,
                    gy, gw, gb](std::vector<Tensor>& g) {
                     ApplyGrads r = apply_backward(g[0], y, a, fin, weight, relu, gy);
                     return std::vector<Tensor>{r.dy, gw ? r.dweight : Tensor(), gb ? r.dbias : Tensor()};
                   });
  return a;
}

ConvGenstats conv2d_bn_relu_genstats(const BnReluInput& in, const Tensor& w, const Conv2dParams& p) {
  const Tensor& x = in.x;
  check_apply(x, in.fin, "conv2d_bn_relu_genstats");
  if (!backend().conv_bn_fusion)  // the composition, op for op
    return conv2d_genstats(batch_norm_apply(x, in.fin, in.weight, in.bias, /*relu=*/true), w, p);

  // One node: the prologue's output a = relu(x * scale + bias) is never kept (on the GPU never
  // written); the backward's graphs apply the prologue again as they load x, or, where refused and
  // on the CPU, the backward recomputes a for the mask and the filter gradient.
  ConvGenstats out;
  kernels::ConvGeom geom;
  bool graph = false;
  {
    autograd::NoGradGuard no_grad;  // conv2d_with checks and allocates; the node is ours (below)
    ConvFusedForward fused = [&](const kernels::ConvGeom& g, Tensor& y) {
      geom = g;
#ifdef TANDEM_WITH_CUDA
      if (x.is_cuda()) {
        out.stats.sum = Tensor::empty({g.o}, DType::F32, y.device());
        out.stats.sq_sum = Tensor::empty({g.o}, DType::F32, y.device());
        TANDEM_BACKEND(x, (void)0,
                       graph = kernels::conv2d_forward_bn_relu_genstats_graph_cuda(
                           g, x, in.fin.scale, in.fin.bias, w, y, out.stats.sum, out.stats.sq_sum));
      }
#endif
      if (!graph) {  // the reference: the prologue as a temporary, then the plain conv
        Tensor a = apply_affine(x, in.fin, /*relu=*/true);
        TANDEM_BACKEND(a, kernels::conv2d_forward_cpu(g, a, w, y), kernels::conv2d_forward_cuda(g, a, w, y));
      }
      return true;  // y is written either way
    };
    out.y = conv2d_with(x, w, p, fused);
  }
  if (x.is_cuda()) count(graph);
  if (!graph) out.stats = reference_stats(out.y, x.dtype());
  const Shape& s = out.y.shape();
  out.stats.count = s[0] * s[1] * s[2];

  const bool gx = x.requires_grad(), gwt = in.weight.defined() && in.weight.requires_grad(),
             gb = in.bias.defined() && in.bias.requires_grad(), gw = w.requires_grad();
  autograd::record("BnReluConv2dGenstatsBackward", {x, in.weight, in.bias, w}, out.y,
                   [geom, x = x.detach(), w = w.detach(), fin = in.fin,
                    weight = in.weight.defined() ? in.weight.detach() : Tensor(),
                    bias = in.bias.defined() ? in.bias.detach() : Tensor(), gx, gwt, gb, gw](std::vector<Tensor>& g) {
                     autograd::NoGradGuard no_grad;
                     const Tensor& dy = g[0];
                     Tensor a;  // the prologue's output, recomputed only where a graph below is refused
                     auto prologue = [&]() -> const Tensor& {
                       if (!a.defined()) a = apply_affine(x, fin, /*relu=*/true);
                       return a;
                     };
                     [[maybe_unused]] const bool graphs = dy.is_cuda();  // (this node exists only when on)
                     Tensor dw;
                     if (gw) {
                       dw = Tensor::empty(w.shape(), dy.dtype(), dy.device());
                       bool done = false;
#ifdef TANDEM_WITH_CUDA
                       if (graphs) {
                         TANDEM_BACKEND(dy, (void)0,
                                        done = kernels::conv2d_backward_filter_bn_relu_graph_cuda(geom, x, fin.scale,
                                                                                                  fin.bias, dy, dw));
                         count(done);
                       }
#endif
                       if (!done)
                         TANDEM_BACKEND(dy, kernels::conv2d_backward_filter_cpu(geom, prologue(), dy, dw),
                                        kernels::conv2d_backward_filter_cuda(geom, prologue(), dy, dw));
                     }
                     if (!gx && !gwt && !gb) return std::vector<Tensor>{Tensor(), Tensor(), Tensor(), dw};
                     Tensor dz = Tensor::empty(x.shape(), dy.dtype(), dy.device());
                     bool masked = false;  // dz = dgrad * [x * scale + bias > 0] from one graph
#ifdef TANDEM_WITH_CUDA
                     if (graphs && dy.dtype() != DType::F32 && weight.defined() && bias.defined()) {
                       // 16-bit: dz and the BN backward's reductions from one graph; dx in one pass.
                       auto channel = [&] { return Tensor::empty(fin.mean.shape(), DType::F32, dy.device()); };
                       Tensor dweight = channel(), dbias = channel(), eq_dy = channel(), eq_x = channel(),
                              eq_bias = channel();
                       bool reduced = false;
                       TANDEM_BACKEND(dy, (void)0,
                                      reduced = kernels::conv2d_backward_data_drelu_dbn_graph_cuda(
                                          geom, dy, w, x, {fin.mean, fin.inv_std, weight, bias}, dz,
                                          {dweight, dbias, eq_dy, eq_x, eq_bias}));
                       count(reduced);
                       if (reduced) {
                         Tensor dx;  // eq_dy dz + eq_x x + eq_bias, per channel
                         if (gx) {
                           Tensor t = add(mul(cast(dz, DType::F32), eq_dy), mul(cast(x, DType::F32), eq_x));
                           dx = cast(add(t, eq_bias), x.dtype());
                         }
                         return std::vector<Tensor>{dx, gwt ? dweight : Tensor(), gb ? dbias : Tensor(), dw};
                       }
                     }
                     if (graphs) {
                       TANDEM_BACKEND(dy, (void)0,
                                      masked = kernels::conv2d_backward_data_drelu_graph_cuda(geom, dy, w, x, fin.scale,
                                                                                              fin.bias, dz));
                       count(masked);
                     }
#endif
                     if (!masked)
                       TANDEM_BACKEND(dy, kernels::conv2d_backward_data_cpu(geom, dy, w, dz),
                                      kernels::conv2d_backward_data_cuda(geom, dy, w, dz));
                     ApplyGrads r = apply_backward(dz, x, masked ? Tensor() : prologue(), fin, weight, /*relu=*/true,
                                                   gx, masked);
                     return std::vector<Tensor>{r.dy, gwt ? r.dweight : Tensor(), gb ? r.dbias : Tensor(), dw};
                   });
  return out;
}

}  // namespace tandem::ops
