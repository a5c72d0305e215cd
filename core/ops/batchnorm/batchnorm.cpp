// core/ops/batchnorm/batchnorm.cpp: checks, backend dispatch and autograd for batch_norm.
//
// Precision contract: x may be f32, f64 (CPU gradient checks), f16 or bf16 (CUDA). weight, bias
// and the running stats are f64 for f64 inputs and f32 for everything else, so a bf16 network keeps
// its BN parameters and statistics in f32 (as PyTorch's cuDNN BN does under autocast). Statistics
// accumulate in at least f32 (f64 on the CPU). The saved batch mean and inverse std are what the
// backward needs besides x, so the input's statistics are never recomputed.
#include "core/ops/batchnorm/batchnorm.h"


#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/batchnorm/kernels.h"

namespace tandem::ops {
namespace {

void check_param(const Tensor& t, const Tensor& x, int64_t C, DType pdt, const char* what) {
  if (!t.defined()) return;
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " must have shape [", C, "] (channels last), got ",
               t.str());
  TANDEM_CHECK(t.dtype() == pdt, "batch_norm: ", what, " must be ", dtype_name(pdt), " for ", dtype_name(x.dtype()),
               " inputs (parameters and statistics stay in f32, or f64 for f64 inputs), got ", t.str());
  check_same_device(x, t, "batch_norm");
}

}  // namespace

BatchNormCudnnStats batchnorm_cudnn_stats() {
#ifdef TANDEM_WITH_CUDA
  return kernels::batchnorm_cudnn_stats();
#else
  return {};
#endif
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps) {
  TANDEM_CHECK(x.dim() >= 2, "batch_norm expects [N, C] or [N, H, W, C] (channels last), got ", x.str());
  TANDEM_CHECK(is_floating(x.dtype()), "batch_norm needs a floating-point input, got ", x.str());
  const int64_t C = x.size(-1);
  const int64_t M = C ? x.numel() / C : 0;
  const DType pdt = autocast::stats_dtype(x.dtype());  // the AMP policy: f32 statistics
  check_param(weight, x, C, pdt, "weight");
  check_param(bias, x, C, pdt, "bias");
  check_param(running_mean, x, C, pdt, "running_mean");
  check_param(running_var, x, C, pdt, "running_var");
  TANDEM_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm: pass both running_mean and running_var, or neither");
  TANDEM_CHECK(training || running_mean.defined(),
               "batch_norm in eval mode needs running_mean and running_var (or call it with training=true)");
  TANDEM_CHECK(!training || M > 1, "batch_norm in training mode needs more than one value per channel, got ",
               x.str(), ": use a larger batch or eval mode");
  TANDEM_CHECK(eps > 0, "batch_norm: eps must be positive, got ", eps);

  Tensor x2 = x.detach().view({M, C});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor y2 = y.view({M, C});
  Tensor save_mean = Tensor::empty({C}, pdt, x.device());
  Tensor save_invstd = Tensor::empty({C}, pdt, x.device());
  Tensor reserve;  // defined when cuDNN ran the forward: its backward then runs through cuDNN too
#ifdef TANDEM_WITH_CUDA
  if (x.is_cuda() && training && backend().cudnn_batchnorm &&
      !kernels::batchnorm_forward_train_cudnn(BatchNormTail::None, x.detach(), Tensor(), weight, bias, running_mean,
                                              running_var, momentum, eps, y, save_mean, save_invstd, reserve))
    reserve = Tensor();
#endif
  if (!reserve.defined())
    TANDEM_BACKEND(x, kernels::batchnorm_forward_cpu(x2, weight, bias, running_mean, running_var, training, momentum,
                                                      eps, y2, save_mean, save_invstd),
                   kernels::batchnorm_forward_cuda(x2, weight, bias, running_mean, running_var, training, momentum, eps,
                                                   y2, save_mean, save_invstd));

  bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
       gb = bias.defined() && bias.requires_grad();
  autograd::record(training ? "BatchNormBackward" : "BatchNormEvalBackward", {x, weight, bias}, y,
                   [x2, w = weight.defined() ? weight.detach() : Tensor(), save_mean, save_invstd, training, gx, gw, gb,
                    shape = x.shape(), M, C, reserve, eps](std::vector<Tensor>& g) {
                     Tensor dy2 = g[0].view({M, C});
                     Tensor dx, dw, db, dx2;
                     if (gx) {
                       dx = Tensor::empty(shape, g[0].dtype(), g[0].device());
                       dx2 = dx.view({M, C});
                     }
                     if (gw) dw = Tensor::empty({C}, save_mean.dtype(), save_mean.device());
                     if (gb) db = Tensor::empty({C}, save_mean.dtype(), save_mean.device());
#ifdef TANDEM_WITH_CUDA
                     // cuDNN ran the forward: its statistics are its own, so its backward (or, if it
                     // refuses, the kernels on recomputed statistics) must run, never the kernels below.
                     if (reserve.defined()) {
                       Tensor no_y, no_dz;  // the plain BN: no fused add/ReLU
                       kernels::batchnorm_backward_train_cudnn(BatchNormTail::None, g[0], x2.view(shape), no_y, w,
                                                               Tensor(), save_mean, save_invstd, reserve, eps, dx,
                                                               no_dz, dw, db);
                       return std::vector<Tensor>{dx, dw, db};
                     }
#endif
                     TANDEM_BACKEND(dy2,
                                    kernels::batchnorm_backward_cpu(dy2, x2, w, save_mean, save_invstd, training, dx2, dw, db),
                                    kernels::batchnorm_backward_cuda(dy2, x2, w, save_mean, save_invstd, training, dx2, dw, db));
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return y;
}

}  // namespace tandem::ops
