// core/ops/norm/norm.cpp: validation, backend dispatch and autograd for layer_norm.
//
// Dtype choice: weight and bias must have x's dtype, also for f16/bf16. Under mixed precision the
// f32 master copies live in the optimizer (optim/), and the layer casts them to the compute dtype
// like every other parameter, so one kernel signature serves all precisions. The kernels still
// compute the statistics, the normalisation and the weight/bias gradient sums in f32.
// The backward always computes dx, dweight and dbias together: the two sums share one pass over
// x and dy, and skipping them when weight is frozen would save little.
#include "core/ops/norm/norm.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/norm/kernels.h"

namespace tandem::ops {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  TANDEM_CHECK(x.dim() >= 1 && x.numel() > 0, "layer_norm: needs a non-empty input, got ", x.str());
  TANDEM_CHECK(is_floating(x.dtype()), "layer_norm: input must be floating point, got ", x.str());
  TANDEM_CHECK(eps > 0, "layer_norm: eps must be positive, got ", eps);
  int64_t d = x.size(-1), m = x.numel() / d;
  check_shape(weight, {d}, "layer_norm", "weight");
  check_shape(bias, {d}, "layer_norm", "bias");
  check_same_dtype(x, weight, "layer_norm");
  check_same_dtype(x, bias, "layer_norm");
  check_same_device(x, weight, "layer_norm");
  check_same_device(x, bias, "layer_norm");

  DType st = autocast::stats_dtype(x.dtype());  // the AMP policy: f32 statistics
  Tensor x2 = x.detach().view({m, d});
  Tensor y = Tensor::empty_like(x);
  Tensor y2 = y.view({m, d});
  Tensor mean = Tensor::empty({m}, st, x.device());
  Tensor rstd = Tensor::empty({m}, st, x.device());
  TANDEM_BACKEND(x, kernels::layer_norm_fwd_cpu(x2, weight, bias, eps, y2, mean, rstd),
                 kernels::layer_norm_fwd_cuda(x2, weight, bias, eps, y2, mean, rstd));
  autograd::record("LayerNormBackward", {x, weight, bias}, y,
                   [x2, w = weight.detach(), mean, rstd, xs = x.shape()](std::vector<Tensor>& g) {
                     int64_t m = x2.size(0), d = x2.size(1);
                     Tensor dy = g[0].view({m, d});
                     Tensor dx = Tensor::empty({m, d}, x2.dtype(), x2.device());
                     Tensor dw = Tensor::empty({d}, x2.dtype(), x2.device());
                     Tensor db = Tensor::empty({d}, x2.dtype(), x2.device());
                     TANDEM_BACKEND(x2, kernels::layer_norm_bwd_cpu(dy, x2, w, mean, rstd, dx, dw, db),
                                    kernels::layer_norm_bwd_cuda(dy, x2, w, mean, rstd, dx, dw, db));
                     return std::vector<Tensor>{dx.view(xs), dw, db};
                   });
  return y;
}

}  // namespace tandem::ops
