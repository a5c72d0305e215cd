// core/ops/batchnorm/batchnorm_relu.cpp: relu(batch_norm(x) [+ z]), composed from the ops or fused by cuDNN.
//
// Both ops are one function, fused_or_composed, with the tail (ops::BatchNormTail: Relu or AddRelu)
// as its argument. The composed path is two or three recorded ops (batch_norm, add, relu_ in place:
// neither batch_norm's nor add's backward reads its output, so overwriting it is safe). The fused
// path checks what batch_norm checks (it runs the same argument checks by calling nothing else, so
// they are repeated here in short form) and records one node with inputs {x, [z,] weight, bias}.
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

Tensor fused_or_composed(BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                         const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training,
                         double momentum, double eps) {
#ifdef TANDEM_WITH_CUDA
  Tensor y = fused_cudnn(tail, x, z, weight, bias, running_mean, running_var, training, momentum, eps);
  if (y.defined()) return y;
#endif
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
