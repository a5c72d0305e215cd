// core/ops/finite/finite.cpp: the inf/NaN count's checks and dispatch (see finite.h).
//
// The tensors are grouped by dtype so each backend call sees one element type: on CUDA that is one
// launch per dtype for the whole list, which is what makes checking every gradient each step cheap
// (ResNet-50 has 161 parameter tensors; one launch each would cost more than the reading).
#include "core/ops/finite/finite.h"

#include <array>

#include "core/ops/common/dispatch.h"
#include "core/ops/finite/kernels.h"

namespace tandem::ops {
namespace {

bool counted(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.numel() > 0; }

}  // namespace

Tensor count_nonfinite(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (counted(t)) return count_nonfinite(ts, t.device());
  return count_nonfinite(ts, Device::cpu());
}

Tensor count_nonfinite(const std::vector<Tensor>& ts, Device device) {
  // One span list per floating dtype, in DType order.
  constexpr DType kFloating[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
  std::array<std::vector<kernels::FiniteSpan>, 4> spans;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!counted(t)) continue;
    TANDEM_CHECK(t.device() == device, "count_nonfinite: tensor ", i, " is ", t.str(), ", but the count lives on ",
                 device.str(), "; check each device's tensors in a call of their own");
    for (size_t d = 0; d < spans.size(); ++d)
      if (t.dtype() == kFloating[d]) spans[d].push_back({t.data_ptr(), t.numel()});
  }
  Tensor count = Tensor::zeros({1}, DType::I64, device);
  for (size_t d = 0; d < spans.size(); ++d) {
    if (spans[d].empty()) continue;
    TANDEM_BACKEND(count, kernels::count_nonfinite_cpu(kFloating[d], spans[d], count.data<int64_t>()),
                   kernels::count_nonfinite_cuda(kFloating[d], device.index, spans[d], count.data<int64_t>()));
  }
  return count;
}

bool all_finite(const std::vector<Tensor>& ts) { return count_nonfinite(ts).to_vector_i64()[0] == 0; }

bool all_finite(const Tensor& x) { return all_finite(std::vector<Tensor>{x}); }

}  // namespace tandem::ops
