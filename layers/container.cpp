// layers/container.cpp: Sequential and Flatten, plus the Python-style float printing for reprs.
//
// Sequential runs a BatchNorm2d directly followed by a ReLU (VGG-BN's and small_cnn's conv -> BN ->
// ReLU) as one op, BatchNorm2d::forward_relu (cuDNN's BN_ACTIVATION on the GPU in training: no
// separate ReLU pass), the same values as the two children one after the other. Both children's
// forward hooks still run, in order: the BN's around the fused op (its post-hook sees the fused
// output, which is what flows on), then the ReLU's around nothing (pre-hook, then post-hook with
// that output).
#include <cstdio>

#include "core/ops/shape/shape.h"
#include "layers/layers.h"

namespace tandem {

std::string py_float(double v) {
  // %g drops trailing zeros and switches to exponent form below 1e-4 with a two-digit exponent,
  // which is exactly how Python prints the eps/momentum/p values that appear in reprs.
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos && s.find("inf") == std::string::npos) s += ".0";
  return s;
}

Sequential::Sequential(std::vector<ModulePtr> mods) {
  for (auto& m : mods) add(std::move(m));
}

ModulePtr Sequential::add(ModulePtr m) {
  TANDEM_CHECK(m != nullptr, "Sequential::add: got a null module");
  return register_module(std::to_string(size()), std::move(m)).get();
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    auto* bn = dynamic_cast<BatchNorm2d*>(child_at(i).get());
    Module* next = i + 1 < size() ? child_at(i + 1).get() : nullptr;
    if (bn && next && dynamic_cast<ReLU*>(next)) {
      h = bn->call([&] { return bn->forward_relu(h); });  // forward_relu opens the BN's profiling range
      h = next->call([&] { return h; });
      ++i;
      continue;
    }
    h = (*child_at(i))(h);
  }
  return h;
}

namespace {
Tensor flatten_nhwc(const Tensor& x) {
  TANDEM_CHECK(x.dim() >= 2, "Flatten expects [N, ...] with at least 2 dims, got ", x.str());
  if (x.dim() == 4 && x.size(1) * x.size(2) > 1 && x.size(3) > 1) {
    // NHWC -> (C, H*W) per sample: view as [N, HW, C, 1] and swap dims 1 and 2.
    int64_t n = x.size(0), hw = x.size(1) * x.size(2), c = x.size(3);
    Tensor t = ops::transpose12(ops::reshape(x, {n, hw, c, 1}));
    return ops::reshape(t, {n, c * hw});
  }
  return ops::flatten(x);  // 1x1 spatial or a single channel: both orders agree, no copy
}
}  // namespace

Flatten::Flatten() : StatelessModule(flatten_nhwc, "Flatten", "start_dim=1, end_dim=-1") {}

}  // namespace tandem
