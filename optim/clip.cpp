// optim/clip.cpp: gradient-norm clipping (see optim/clip.h).
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/ops/common/dispatch.h"
#include "core/profile.h"
#include "optim/kernels/clip.h"

namespace tandem::optim {

namespace {
// Calls f(dtype, device, tensors) once per (device, dtype) group of the defined tensors.
template <typename F>
void for_each_group(const std::vector<Tensor>& grads, F&& f) {
  std::vector<bool> done(grads.size(), false);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (done[i] || !grads[i].defined()) continue;
    std::vector<Tensor> group;
    for (size_t j = i; j < grads.size(); ++j) {
      if (done[j] || !grads[j].defined() || grads[j].dtype() != grads[i].dtype() ||
          grads[j].device() != grads[i].device())
        continue;
      done[j] = true;
      group.push_back(grads[j]);
    }
    f(grads[i].dtype(), grads[i].device(), group);
  }
}

#ifdef TANDEM_WITH_CUDA
std::vector<kernels::GradTensor> refs(const std::vector<Tensor>& ts) {
  std::vector<kernels::GradTensor> out;
  for (const auto& t : ts) out.push_back({t.data_ptr(), t.numel()});
  return out;
}
#endif

// Sum of x_i^2 in f64 over kLanes interleaved partial sums, combined pairwise at the end. One
// ordered add chain waited ~4 cycles per element on the previous add (5.5 % of bert_small's
// 1-thread step under perf, 11 M gradients); 8 independent chains vectorise and keep the adder
// busy. The order is fixed, so the result is deterministic (and shared by the host API and
// GradClipper, which must agree bit for bit); it differs from the one-chain order in the last bits.
template <typename T>
double sum_squares(const T* __restrict x, int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(x[i + k]) * static_cast<double>(x[i + k]);
  for (int k = 0; i < n; ++i, ++k) acc[k] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// The CPU loops, shared by the host API and GradClipper: sq += the squares in f64; g *= scale. The
// length is read once and the sum kept in a local: with numel() in the loop test and `sq` a
// reference, each element called shape_numel and stored the sum (add_squares 4.1 % and shape_numel
// 1.3 % of bert_small's steady step at 1 thread under perf). Tensors are added to sq in order.
void add_squares_cpu(DType dt, const std::vector<Tensor>& group, double& sq) {
  TANDEM_CPU_FLOAT_TYPES(dt, T, [&] {
    double acc = sq;
    for (const auto& g : group) acc += sum_squares(g.data<T>(), g.numel());
    sq = acc;
  });
}

void scale_cpu(DType dt, const std::vector<Tensor>& group, double scale) {
  TANDEM_CPU_FLOAT_TYPES(dt, T, [&] {
    const T s = static_cast<T>(scale);
    for (const auto& g : group) {
      T* x = g.data<T>();
      const int64_t n = g.numel();
      for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }
  });
}

constexpr double kEps = 1e-6;  // PyTorch's guard against dividing by a zero norm
}  // namespace

double grad_norm(const std::vector<Tensor>& grads, const SumSquaresReduce& reduce) {
  double sq = 0;
  for_each_group(grads, [&](DType dt, Device dev, const std::vector<Tensor>& group) {
    if (dev.is_cuda()) {
#ifdef TANDEM_WITH_CUDA
      sq += kernels::sum_squares_cuda(dt, dev.index, refs(group));
#endif
      return;
    }
    add_squares_cpu(dt, group, sq);
  });
  if (reduce) {
    std::vector<double> v{sq};
    reduce(v);
    TANDEM_CHECK(v.size() == 1, "grad_norm: the reduce hook must keep the vector's length (1), got ", v.size());
    sq = v[0];
  }
  return std::sqrt(sq);
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const SumSquaresReduce& reduce) {
  profile::Range range("clip_grad_norm");
  TANDEM_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm,
               " (leave [clip_grad_norm] unset to disable clipping)");
  const double total = grad_norm(grads, reduce);
  const double scale = max_norm / (total + kEps);
  if (!std::isfinite(total) || !(scale < 1.0)) return total;  // inf/NaN: see the header
  for_each_group(grads, [&](DType dt, Device dev, const std::vector<Tensor>& group) {
    if (dev.is_cuda()) {
#ifdef TANDEM_WITH_CUDA
      kernels::scale_cuda(dt, dev.index, refs(group), static_cast<float>(scale));
#endif
      return;
    }
    scale_cpu(dt, group, scale);
  });
  return total;
}

double clip_grad_norm(const Optimizer& opt, double max_norm, const SumSquaresReduce& reduce) {
  return clip_grad_norm(opt.grads(), max_norm, reduce);
}

GradClipper::GradClipper(double max_norm, DeviceSumReduce reduce) : max_norm_(max_norm), reduce_(std::move(reduce)) {
  TANDEM_CHECK(max_norm > 0, "GradClipper: max_norm must be > 0, got ", max_norm,
               " (build no clipper to disable clipping)");
}

void GradClipper::clip(const std::vector<Tensor>& grads) {
  profile::Range range("clip_grad_norm");
  Device dev = Device::cpu();
  bool any = false;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    TANDEM_CHECK(!any || g.device() == dev, "GradClipper: the gradients are on ", dev.str(), " and ",
                 g.device().str(), "; it clips the gradients of one device (use clip_grad_norm across devices)");
    dev = g.device();
    any = true;
  }
  const DType sum_dtype = dev.is_cuda() ? DType::F32 : DType::F64;  // each backend's accumulation type
  if (!norm_.defined() || norm_.device() != dev) {  // the first call: before any capture
    sum_sq_ = Tensor::zeros({1}, sum_dtype, dev);
    norm_ = Tensor::zeros({1}, DType::F32, dev);
    coef_ = dev.is_cuda() ? Tensor::zeros({1}, DType::F32, dev) : Tensor();
  }
  auto reduce = [&] {
    if (!reduce_) return;
    reduce_(sum_sq_);
    TANDEM_CHECK(sum_sq_.numel() == 1 && sum_sq_.dtype() == sum_dtype && sum_sq_.device() == dev,
                 "GradClipper: the reduce hook must keep the sum tensor's shape, dtype and device");
  };
  if (!dev.is_cuda()) {  // the host API's loops (bitwise its results), with the tensors filled in
    double sq = 0;
    for_each_group(grads, [&](DType dt, Device, const std::vector<Tensor>& group) { add_squares_cpu(dt, group, sq); });
    *sum_sq_.data<double>() = sq;
    reduce();
    const double total = std::sqrt(*sum_sq_.data<double>());
    *norm_.data<float>() = static_cast<float>(total);
    const double scale = max_norm_ / (total + kEps);
    if (!std::isfinite(total) || !(scale < 1.0)) return;
    for_each_group(grads, [&](DType dt, Device, const std::vector<Tensor>& group) { scale_cpu(dt, group, scale); });
    return;
  }
#ifdef TANDEM_WITH_CUDA
  std::vector<std::pair<DType, std::vector<Tensor>>> groups;
  for_each_group(grads, [&](DType dt, Device, const std::vector<Tensor>& group) { groups.emplace_back(dt, group); });
  // Per-dtype totals, allocated in the step (inside a capture: graph memory that dies in it).
  Tensor totals = Tensor::empty({std::max<int64_t>(1, static_cast<int64_t>(groups.size()))}, DType::F32, dev);
  for (size_t g = 0; g < groups.size(); ++g)
    kernels::sum_squares_to_cuda(sum_tables_[groups[g].first], groups[g].first, dev.index, refs(groups[g].second),
                                 totals.data<float>() + g);
  kernels::sum_totals_cuda(dev.index, totals.data<float>(), static_cast<int>(groups.size()), sum_sq_.data<float>());
  reduce();
  kernels::clip_coefficient_cuda(dev.index, sum_sq_.data<float>(), max_norm_, norm_.data<float>(), coef_.data<float>());
  for (auto& [dt, group] : groups)
    kernels::scale_by_cuda(scale_tables_[dt], dt, dev.index, refs(group), coef_.data<float>());
#endif
}

}  // namespace tandem::optim
