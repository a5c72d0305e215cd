// dist/extras/sync_batchnorm.cpp: the two all-reduces of synchronised batch norm, composed from ops.
//
// With n the global count, xhat = (x - mean) * invstd and k = weight * invstd (per channel):
//   y  = x * k + (bias - mean * k)
//   dx = k * (dy - sum(dy)/n - xhat * sum(dy * xhat)/n)     sums over every rank's rows
// Per-channel [C] vectors are scaled by the global 1/n, a [1] tensor on the device (viewed as
// [C, 1] so it broadcasts): the host never waits for the count, so a GPU step does not sync.
#include "dist/extras/sync_batchnorm.h"

#include "core/autograd.h"
#include "core/ops/ops.h"

namespace tandem::dist {
namespace {

Tensor sync_batch_norm(Communicator& comm, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                       Tensor& running_var, double momentum, double eps) {
  const int64_t c = w.numel();
  const DType dt = w.dtype(), xdt = x.dtype();
  auto widen = [dt](const Tensor& t) { return t.dtype() == dt ? t : ops::cast(t, dt); };
  auto per_n = [c](const Tensor& v, const Tensor& inv_n) { return ops::mul(v.view({c, 1}), inv_n).view({c}); };

  Tensor xw = widen(x.detach());
  Tensor n_local = Tensor::full({1}, static_cast<double>(x.numel() / c), dt, x.device());
  Tensor stats = ops::concat_channels(
      {ops::sum_to_trailing(xw, {c}), ops::sum_to_trailing(ops::square(xw), {c}), n_local});
  comm.all_reduce(stats, ReduceOp::Sum, "sync_batchnorm stats")->wait();
  Tensor sum = stats.slice(0, c), n = stats.slice(2 * c, 2 * c + 1);
  Tensor inv_n = ops::pow(n, -1.0f);
  Tensor mean = per_n(sum, inv_n);
  Tensor sq_dev = ops::sub(stats.slice(c, 2 * c), ops::mul(sum, mean));  // sum (x - mean)^2 = Q - S*mean
  Tensor invstd = ops::pow(ops::add_scalar(per_n(sq_dev, inv_n), static_cast<float>(eps)), -0.5f);
  const float m = static_cast<float>(momentum);
  ops::axpby_(running_mean, mean, 1 - m, m);
  ops::axpby_(running_var, per_n(sq_dev, ops::pow(ops::add_scalar(n, -1.0f), -1.0f)), 1 - m, m);  // unbiased

  Tensor k = ops::mul(w.detach(), invstd);
  Tensor y = ops::add(ops::mul(xw, k), ops::sub(b.detach(), ops::mul(mean, k)));
  if (xdt != dt) y = ops::cast(y, xdt);
  autograd::record("SyncBatchNormBackward", {x, w, b}, y,
                   [=, &comm, need_dx = x.requires_grad()](std::vector<Tensor>& g) {
                     Tensor dy = widen(g[0]);
                     Tensor xhat = ops::mul(ops::sub(xw, mean), invstd);
                     Tensor db = ops::sum_to_trailing(dy, {c}), dw = ops::sum_to_trailing(ops::mul(dy, xhat), {c});
                     Tensor dx;
                     if (need_dx) {  // the same decision on every rank: the graphs are the same
                       Tensor sums = ops::concat_channels({db, dw});
                       comm.all_reduce(sums, ReduceOp::Sum, "sync_batchnorm grads")->wait();
                       Tensor centred = ops::sub(dy, per_n(sums.slice(0, c), inv_n));
                       dx = ops::mul(ops::sub(centred, ops::mul(xhat, per_n(sums.slice(c, 2 * c), inv_n))), k);
                       if (xdt != dt) dx = ops::cast(dx, xdt);
                     }
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return y;
}

}  // namespace

Tensor SyncBatchNorm::normalize_training(const Tensor& x) {
  // One rank has nothing to synchronise with: plain batch norm is the same computation, cheaper.
  if (comm_->size() == 1) return BatchNorm2d::normalize_training(x);
  return sync_batch_norm(*comm_, x, weight_, bias_, running_mean_, running_var_, momentum(), eps());
}

Tensor SyncBatchNorm::normalize_training_add_relu(const Tensor& x, const Tensor& residual) {
  if (comm_->size() == 1) return BatchNorm2d::normalize_training_add_relu(x, residual);
  Tensor y = sync_batch_norm(*comm_, x, weight_, bias_, running_mean_, running_var_, momentum(), eps());
  y = ops::add(y, residual);
  ops::relu_(y);  // add saves nothing for its backward, so overwriting its output is safe
  return y;
}

Tensor SyncBatchNorm::normalize_training_relu(const Tensor& x) {
  if (comm_->size() == 1) return BatchNorm2d::normalize_training_relu(x);
  Tensor y = sync_batch_norm(*comm_, x, weight_, bias_, running_mean_, running_var_, momentum(), eps());
  ops::relu_(y);  // the synchronised BN's backward reads xw, not y: overwriting y is safe
  return y;
}

ModulePtr convert_sync_batchnorm(ModulePtr m, Communicator& comm) {
  if (dynamic_cast<SyncBatchNorm*>(m.get())) return m;  // already synchronised
  if (auto* bn = dynamic_cast<BatchNorm2d*>(m.get())) return std::make_shared<SyncBatchNorm>(*bn, comm);
  for (auto& [name, child] : m->named_children()) {
    ModulePtr converted = convert_sync_batchnorm(child, comm);
    if (converted != child) m->replace_child(name, converted);
  }
  return m;
}

}  // namespace tandem::dist
