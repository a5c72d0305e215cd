// core/ops/reduce/reduce.cpp: dispatch and autograd for sum and mean to a scalar.
//
// The result has x's dtype and shape [1]; the kernels accumulate in f32 (CUDA) or double (CPU)
// whatever that dtype is. mean divides the f32/double total before the final rounding, so a
// 16-bit mean does not overflow just because the sum would.
// Backward broadcasts the scalar gradient (times 1/numel for mean) to x's shape.
#include "core/ops/reduce/reduce.h"

#include "core/autograd.h"
#include "core/ops/copy/copy.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/reduce/kernels.h"

namespace tandem::ops {
namespace {

Tensor reduce_scaled(const Tensor& x, double scale, const char* name) {
  TANDEM_CHECK(is_floating(x.dtype()), name, ": input must be floating point, got ", x.str(),
               "; cast integer tensors with .to(DType::F32) first");
  Tensor out = Tensor::empty({1}, x.dtype(), x.device());
  TANDEM_BACKEND(x, kernels::sum_cpu(x, scale, out), kernels::sum_cuda(x, scale, out));
  autograd::record(std::string(name) + "Backward", {x}, out,
                   [xs = x.shape(), dt = x.dtype(), dev = x.device(), scale](std::vector<Tensor>& g) {
                     Tensor gs = g[0].dtype() == dt ? g[0] : cast_raw(g[0], dt);
                     Tensor dx = Tensor::empty(xs, dt, dev);
                     TANDEM_BACKEND(dx, kernels::broadcast_scalar_cpu(gs, scale, dx),
                                    kernels::broadcast_scalar_cuda(gs, scale, dx));
                     return std::vector<Tensor>{dx};
                   });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_scaled(x, 1.0, "Sum"); }

Tensor mean(const Tensor& x) {
  TANDEM_CHECK(x.numel() > 0, "mean: the mean of an empty tensor ", x.str(), " is undefined");
  return reduce_scaled(x, 1.0 / static_cast<double>(x.numel()), "Mean");
}

}  // namespace tandem::ops
