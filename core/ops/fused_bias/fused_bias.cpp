// core/ops/fused_bias/fused_bias.cpp: checks, backend dispatch and autograd for bias_gelu and
// bias_dropout_add (see fused_bias.h for the semantics and the pass counts).
#include "core/ops/fused_bias/fused_bias.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/fused_bias/kernels.h"

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
  check_bias(x, bias, "bias_dropout_add");
  TANDEM_CHECK(residual.defined(), "bias_dropout_add: the residual must be given");
  check_same_device(x, residual, "bias_dropout_add");
  check_same_dtype(x, residual, "bias_dropout_add");
  TANDEM_CHECK(residual.shape() == x.shape(), "bias_dropout_add: residual ", shape_str(residual.shape()),
               " must have the shape of x ", shape_str(x.shape()));
  TANDEM_CHECK(p >= 0.0f && p <= 1.0f, "bias_dropout_add: dropout probability must be in [0, 1], got ", p);
  kernels::DropoutMask m;  // p = 0: no dropout, and no counters drawn (as ops::dropout in eval)
  if (training && p > 0.0f) {
    m.p = p;
    // The counters ops::dropout would use (and, inside a CUDA graph capture, its device slot).
    const RngDraw d = gen.draw(static_cast<uint64_t>(x.numel()), x.device());
    m.seed = d.seed, m.offset = d.offset, m.slot = d.slot;
  }
  Tensor y = Tensor::empty_like(x);
  TANDEM_BACKEND(x, kernels::bias_dropout_add_cpu(x, bias, residual, y, m),
                 kernels::bias_dropout_add_cuda(x, bias, residual, y, m));
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

}  // namespace tandem::ops
