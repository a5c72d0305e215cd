// dist/tp/clip.cpp: the split and replicated squares, summed where each belongs (see clip.h).
#include "dist/tp/clip.h"

#include <cmath>
#include <vector>

#include "optim/clip.h"

namespace tandem::dist::tp {

double grad_norm(const Module& model, const TpLayout& layout, Communicator& tp) {
  std::vector<Tensor> split, replicated;
  for (const auto& [name, p] : model.named_parameters())
    (layout.count(name) ? split : replicated).push_back(p.grad());
  // optim::grad_norm's hook sums the split squares over the group (in f64, on the host).
  const double s = optim::grad_norm(split, [&tp](std::vector<double>& sums) {
    Tensor t = Tensor::from_vector_f64(sums, {static_cast<int64_t>(sums.size())}, DType::F64, tp.device());
    tp.all_reduce(t, ReduceOp::Sum, "tp grad_norm")->wait();
    sums = t.to_vector_f64();
  });
  const double r = optim::grad_norm(replicated);
  return std::sqrt(s * s + r * r);
}

double clip_grad_norm(const Module& model, const TpLayout& layout, Communicator& tp, double max_norm) {
  TANDEM_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double total = grad_norm(model, layout, tp);
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
  // optim's clipping (its scaling kernels and its rule), told the global norm through its hook.
  optim::clip_grad_norm(grads, max_norm, [total](std::vector<double>& sums) { sums.assign(1, total * total); });
  return total;
}

}  // namespace tandem::dist::tp
