// core/ops/fused_bias/fused_bias.cpp: checks, backend dispatch and autograd for bias_gelu and
// bias_dropout_add (see fused_bias.h for the semantics and the pass counts).
#include "core/ops/fused_bias/fused_bias.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/fused_bias/kernels.h"
#include "core/ops/matmul/matmul.h"

namespace tandem::ops {
namespace {

void check_bias(const Tensor& x, const Tensor& bias, const char* op) {
  TANDEM_CHECK(x.defined() && bias.defined(), op, ": x and bias must both be given");
  check_same_device(x, bias, op);
  check_same_dtype(x, bias, op);
  TANDEM_CHECK(is_floating(x.dtype()), op, " needs floating-point tensors, got ", x.str());
  TANDEM_CHECK(!(x.is_cuda() && x.dtype() == DType::F64), op,
               ": f64 exists for CPU gradient checks only; cast to f32/bf16/f16 for CUDA");
  TANDEM_CHECK(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.size(-1), op, ": bias must be [C] with C the last",
               " dimension of x, got x ", shape_str(x.shape()), " and bias ", shape_str(bias.shape()));
}

// dx (x's shape) and, when the bias needs it, dbias [C] from one backend call.
template <typename Run>
std::pair<Tensor, Tensor> backward_pair(const Tensor& dy, int64_t C, bool want_db, Run&& run) {
  Tensor dx = Tensor::empty_like(dy);
  Tensor db = want_db ? Tensor::empty({C}, dy.dtype(), dy.device()) : Tensor();
  run(dx, db);
  return {dx, db};
}

// residual + dropout(x + bias) with the checks, drawing the counters ops::dropout would use (and,
// inside a CUDA graph capture, its device slot) into `m`; p = 0 or eval: no dropout, nothing drawn.
Tensor dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, float p, bool training,
                           Generator& gen, const char* op, kernels::DropoutMask& m) {
  check_bias(x, bias, op);
  TANDEM_CHECK(residual.defined(), op, ": the residual must be given");
  check_same_device(x, residual, op);
  check_same_dtype(x, residual, op);
  TANDEM_CHECK(residual.shape() == x.shape(), op, ": residual ", shape_str(residual.shape()),
               " must have the shape of x ", shape_str(x.shape()));
  TANDEM_CHECK(p >= 0.0f && p <= 1.0f, op, ": dropout probability must be in [0, 1], got ", p);
  m = kernels::DropoutMask{};
  if (training && p > 0.0f) {
    m.p = p;
    const RngDraw d = gen.draw(static_cast<uint64_t>(x.numel()), x.device());
    m.seed = d.seed, m.offset = d.offset, m.slot = d.slot;
  }
  Tensor y = Tensor::empty_like(x);
  TANDEM_BACKEND(x, kernels::bias_dropout_add_cpu(x, bias, residual, y, m),
                 kernels::bias_dropout_add_cuda(x, bias, residual, y, m));
  return y;
}

// z = h w^T without autograd: the composite ops record one node for the GEMM and its tail.
Tensor bias_free_gemm(const Tensor& h, const Tensor& w) {
  autograd::NoGradGuard no_grad;
  return linear(h.detach(), w.detach());
}

// The composite's backward given dz (the tail's map, already run): dh, dw, db from linear_grads.
std::vector<Tensor> gemm_grads(const Tensor& dz, const Tensor& h, const Tensor& w, bool gh, bool gw, bool gb) {
  const int64_t out = w.size(0), in = w.size(1), M = dz.numel() / out;
  LinearGrads d = linear_grads(dz.view({M, out}), gw ? h.view({M, in}) : Tensor(), w, gh, gw, gb);
  return {gh ? d.dx.view(h.shape()) : Tensor(), d.dw, d.db};
}

}  // namespace

Tensor bias_gelu(const Tensor& x, const Tensor& bias) {
  check_bias(x, bias, "bias_gelu");
  Tensor y = Tensor::empty_like(x);
  TANDEM_BACKEND(x, kernels::bias_gelu_cpu(x, bias, y), kernels::bias_gelu_cuda(x, bias, y));
  const bool gb = bias.requires_grad();
  // Saves the pre-bias x and the bias; the backward kernel re-adds them (fused_bias.h).
  autograd::record("BiasGeluBackward", {x, bias}, y,
                   [x = x.detach(), bias = bias.detach(), gb](std::vector<Tensor>& g) {
                     const Tensor dy = g[0].detach();
                     auto [dx, db] = backward_pair(dy, bias.numel(), gb, [&](Tensor& dx, Tensor& db) {
                       TANDEM_BACKEND(dy, kernels::bias_gelu_backward_cpu(dy, x, bias, dx, db),
                                      kernels::bias_gelu_backward_cuda(dy, x, bias, dx, db));
                     });
                     return std::vector<Tensor>{dx, db};
                   });
  return y;
}

Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, float p, bool training,
                        Generator& gen) {
  kernels::DropoutMask m;
  Tensor y = dropout_add_forward(x, bias, residual, p, training, gen, "bias_dropout_add", m);
  const bool gb = bias.requires_grad();
  // Nothing saved: the mask is regenerated from (seed, offset). d residual is dy itself.
  autograd::record("BiasDropoutAddBackward", {x, bias, residual}, y, [m, gb, C = bias.numel()](std::vector<Tensor>& g) {
    const Tensor dy = g[0].detach();
    auto [dx, db] = backward_pair(dy, C, gb, [&](Tensor& dx, Tensor& db) {
      TANDEM_BACKEND(dy, kernels::dropout_bias_backward_cpu(dy, dx, db, m),
                     kernels::dropout_bias_backward_cuda(dy, dx, db, m));
    });
    return std::vector<Tensor>{dx, db, g[0]};
  });
  return y;
}

Tensor linear_bias_gelu(const Tensor& h, const Tensor& w, const Tensor& bias) {
  Tensor z = bias_free_gemm(h, w);
  check_bias(z, bias, "linear_bias_gelu");
  Tensor y = Tensor::empty_like(z);
  TANDEM_BACKEND(z, kernels::bias_gelu_cpu(z, bias, y), kernels::bias_gelu_cuda(z, bias, y));
  const bool gh = h.requires_grad(), gw = w.requires_grad(), gb = bias.requires_grad();
  autograd::record("LinearBiasGeluBackward", {h, w, bias}, y,
                   [h = h.detach(), w = w.detach(), z, bias = bias.detach(), gh, gw, gb](std::vector<Tensor>& g) {
                     const Tensor dy = g[0].detach();
                     Tensor dz = Tensor::empty_like(dy), none;  // the map only: db comes from dw's GEMM
                     TANDEM_BACKEND(dy, kernels::bias_gelu_backward_cpu(dy, z, bias, dz, none),
                                    kernels::bias_gelu_backward_cuda(dy, z, bias, dz, none));
                     return gemm_grads(dz, h, w, gh, gw, gb);
                   });
  return y;
}

Tensor linear_bias_dropout_add(const Tensor& h, const Tensor& w, const Tensor& bias, const Tensor& residual, float p,
                               bool training, Generator& gen) {
  kernels::DropoutMask m;
  Tensor y = dropout_add_forward(bias_free_gemm(h, w), bias, residual, p, training, gen, "linear_bias_dropout_add", m);
  const bool gh = h.requires_grad(), gw = w.requires_grad(), gb = bias.requires_grad();
  // Nothing of z saved: the mask is regenerated from (seed, offset); d residual is dy itself.
  autograd::record("LinearBiasDropoutAddBackward", {h, w, bias, residual}, y,
                   [h = h.detach(), w = w.detach(), m, gh, gw, gb](std::vector<Tensor>& g) {
                     const Tensor dy = g[0].detach();
                     Tensor dz = Tensor::empty_like(dy), none;
                     TANDEM_BACKEND(dy, kernels::dropout_bias_backward_cpu(dy, dz, none, m),
                                    kernels::dropout_bias_backward_cuda(dy, dz, none, m));
                     std::vector<Tensor> res = gemm_grads(dz, h, w, gh, gw, gb);
                     res.push_back(g[0]);
                     return res;
                   });
  return y;
}

}  // namespace tandem::ops
