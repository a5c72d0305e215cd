// core/ops/batchnorm/batchnorm_relu.cpp: relu(batch_norm(x) [+ z]), composed from the ops, or fused
// by cuDNN (CUDA) or by tandem's CPU kernels (batchnorm/cpu.cpp).
//
// Both ops are one function, fused_or_composed, with the tail (ops::BatchNormTail: Relu or AddRelu)
// as its argument. The composed path is two or three recorded ops (batch_norm, add, relu_ in place:
// neither batch_norm's nor add's backward reads its output, so overwriting it is safe). Each fused
// path takes only problems whose batch_norm checks would pass (they are repeated here in short form;
// anything else goes to the composition, which gives the message) and records one node with inputs
// {x, [z,] weight, bias}.
#include "core/ops/batchnorm/batchnorm_relu.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/batchnorm/batchnorm.h"
#include "core/ops/batchnorm/kernels.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/elementwise/elementwise.h"

namespace tandem::ops {
namespace {

Tensor composed(BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps) {
  Tensor y = batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
  if (tail == BatchNormTail::AddRelu) y = add(y, z);
  relu_(y);
  return y;
}

#ifdef TANDEM_WITH_CUDA
// cuDNN's fused call, or an undefined tensor when this problem is not for it (eval, CPU, odd shapes,
// bad arguments with their messages: all left to the composition) or cuDNN refused it.
Tensor fused_cudnn(BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                   Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps) {
  // Only where batch_norm's own checks would pass for its cuDNN path too.
  const int64_t C = x.dim() >= 2 ? x.size(-1) : 0;
  auto param_ok = [&](const Tensor& t) {
    return !t.defined() || (t.dim() == 1 && t.size(0) == C && t.dtype() == DType::F32 && t.device() == x.device());
  };
  if (!(x.is_cuda() && training && backend().cudnn_batchnorm && (x.dim() == 2 || x.dim() == 4) && C > 0 &&
        x.numel() / C > 1 && eps > 0 && param_ok(weight) && param_ok(bias) && param_ok(running_mean) &&
        param_ok(running_var) && running_mean.defined() == running_var.defined()))
    return Tensor();
  const bool add = tail == BatchNormTail::AddRelu;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor save_mean = Tensor::empty({C}, DType::F32, x.device());
  Tensor save_invstd = Tensor::empty({C}, DType::F32, x.device());
  Tensor reserve;
  if (!kernels::batchnorm_forward_train_cudnn(tail, x.detach(), add ? z.detach() : Tensor(), weight, bias,
                                              running_mean, running_var, momentum, eps, y, save_mean, save_invstd,
                                              reserve))
    return Tensor();
  const bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  std::vector<Tensor> inputs = add ? std::vector<Tensor>{x, z, weight, bias} : std::vector<Tensor>{x, weight, bias};
  autograd::record(
      add ? "BatchNormAddReluBackward" : "BatchNormReluBackward", inputs, y,
      [tail, x = x.detach(), out = y.detach(), w = weight.defined() ? weight.detach() : Tensor(),
       b = bias.defined() ? bias.detach() : Tensor(), save_mean, save_invstd, reserve, eps, gw,
       gb](std::vector<Tensor>& g) {
        Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
        Tensor dz = tail == BatchNormTail::AddRelu ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
        Tensor dw = gw ? Tensor::empty({x.size(-1)}, DType::F32, x.device()) : Tensor();
        Tensor db = gb ? Tensor::empty({x.size(-1)}, DType::F32, x.device()) : Tensor();
        // cuDNN's fused backward, or (if it refuses) the ReLU mask from `out` and the kernels.
        kernels::batchnorm_backward_train_cudnn(tail, g[0], x, out, w, b, save_mean, save_invstd, reserve, eps, dx,
                                                dz, dw, db);
        if (tail == BatchNormTail::AddRelu) return std::vector<Tensor>{dx, dz, dw, db};
        return std::vector<Tensor>{dx, dw, db};
      });
  return y;
}
#endif

// The CPU's fused path (training, f32 and f64: core/ops/batchnorm/cpu.cpp), or an undefined tensor
// when the problem is not for it (eval, 16-bit, CUDA, bad arguments with their messages: all left
// to the composition, whose bytes it reproduces).
Tensor fused_cpu(BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                 Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps) {
  const DType dt = x.dtype();
  const int64_t C = x.dim() >= 2 ? x.size(-1) : 0;
  const int64_t M = C ? x.numel() / C : 0;
  // Only where batch_norm's own checks would pass (on the CPU the parameter dtype is x's).
  auto param_ok = [&](const Tensor& t) {
    return !t.defined() || (t.dim() == 1 && t.size(0) == C && t.dtype() == dt && t.device() == x.device());
  };
  if (!(!x.is_cuda() && training && (dt == DType::F32 || dt == DType::F64) && C > 0 && M > 1 && eps > 0 &&
        param_ok(weight) && param_ok(bias) && param_ok(running_mean) && param_ok(running_var) &&
        running_mean.defined() == running_var.defined()))
    return Tensor();
  const bool add = tail == BatchNormTail::AddRelu;
  Tensor x2 = x.detach().view({M, C});
  Tensor z2 = add ? z.detach().view({M, C}) : Tensor();
  Tensor y = Tensor::empty(x.shape(), dt, x.device());
  Tensor y2 = y.view({M, C});
  Tensor save_mean = Tensor::empty({C}, dt, x.device());
  Tensor save_invstd = Tensor::empty({C}, dt, x.device());
  kernels::batchnorm_forward_fused_cpu(tail, x2, z2, weight, bias, running_mean, running_var, momentum, eps, y2,
                                       save_mean, save_invstd);
  const bool gx = x.requires_grad(), gz = add && z.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  std::vector<Tensor> inputs = add ? std::vector<Tensor>{x, z, weight, bias} : std::vector<Tensor>{x, weight, bias};
  autograd::record(add ? "BatchNormAddReluBackward" : "BatchNormReluBackward", inputs, y,
                   [tail, add, x2, out = y2.detach(), w = weight.defined() ? weight.detach() : Tensor(), save_mean,
                    save_invstd, gx, gz, gw, gb, shape = x.shape(), M, C](std::vector<Tensor>& g) {
                     Tensor dy2 = g[0].view({M, C});
                     auto grad = [&](bool want, const Shape& s) {
                       return want ? Tensor::empty(s, g[0].dtype(), g[0].device()) : Tensor();
                     };
                     Tensor dx = grad(gx, shape), dz = grad(gz, shape), dw = grad(gw, {C}), db = grad(gb, {C});
                     Tensor dx2 = gx ? dx.view({M, C}) : Tensor(), dz2 = gz ? dz.view({M, C}) : Tensor();
                     kernels::batchnorm_backward_fused_cpu(tail, dy2, x2, out, w, save_mean, save_invstd, dx2, dz2,
                                                           dw, db);
                     if (add) return std::vector<Tensor>{dx, dz, dw, db};
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return y;
}

Tensor fused_or_composed(BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                         const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training,
                         double momentum, double eps) {
#ifdef TANDEM_WITH_CUDA
  Tensor y = fused_cudnn(tail, x, z, weight, bias, running_mean, running_var, training, momentum, eps);
  if (y.defined()) return y;
#endif
  Tensor yc = fused_cpu(tail, x, z, weight, bias, running_mean, running_var, training, momentum, eps);
  if (yc.defined()) return yc;
  return composed(tail, x, z, weight, bias, running_mean, running_var, training, momentum, eps);
}

}  // namespace

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps) {
  return fused_or_composed(BatchNormTail::Relu, x, Tensor(), weight, bias, running_mean, running_var, training,
                           momentum, eps);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                           Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps) {
  check_same_device(x, z, "batch_norm_add_relu");
  check_same_dtype(x, z, "batch_norm_add_relu");
  TANDEM_CHECK(x.shape() == z.shape(), "batch_norm_add_relu: the residual ", z.str(), " must have the shape of x ",
               x.str(), "; a strided block needs its downsample branch");
  return fused_or_composed(BatchNormTail::AddRelu, x, z, weight, bias, running_mean, running_var, training,
                           momentum, eps);
}

}  // namespace tandem::ops
