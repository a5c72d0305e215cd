// layers/pooling.cpp: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d over NHWC.
#include "core/ops/pool/pool.h"
#include "core/ops/shape/shape.h"
#include "layers/layers.h"

namespace tandem {
namespace {
const char* py_bool(bool b) { return b ? "True" : "False"; }
}  // namespace

Pool2d::Pool2d(int k, int stride, int pad, bool ceil_mode, bool count_include_pad) {
  TANDEM_CHECK(k > 0 && stride >= 0 && pad >= 0 && 2 * pad <= k, "pooling: kernel_size=", k, ", stride=", stride,
               ", padding=", pad, " is invalid (padding must be at most half the kernel, as in PyTorch)");
  p_.kernel_h = p_.kernel_w = k;
  p_.stride_h = p_.stride_w = stride == 0 ? k : stride;  // PyTorch: stride=None means kernel_size
  p_.pad_h = p_.pad_w = pad;
  p_.ceil_mode = ceil_mode;
  p_.count_include_pad = count_include_pad;
}

std::string Pool2d::window_repr() const {
  return "kernel_size=" + std::to_string(p_.kernel_h) + ", stride=" + std::to_string(p_.stride_h) +
         ", padding=" + std::to_string(p_.pad_h);
}

MaxPool2d::MaxPool2d(int kernel_size, int stride, int padding, bool ceil_mode)
    : Pool2d(kernel_size, stride, padding, ceil_mode, true) {}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, p_); }

std::string MaxPool2d::extra_repr() const { return window_repr() + ", dilation=1, ceil_mode=" + py_bool(p_.ceil_mode); }

AvgPool2d::AvgPool2d(int kernel_size, int stride, int padding, bool ceil_mode, bool count_include_pad)
    : Pool2d(kernel_size, stride, padding, ceil_mode, count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) { return ops::avg_pool2d(x, p_); }

std::string AvgPool2d::extra_repr() const { return window_repr(); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int out_h, int out_w) : oh_(out_h), ow_(out_w) {
  TANDEM_CHECK(oh_ > 0 && ow_ > 0, "AdaptiveAvgPool2d: output size (", oh_, ", ", ow_, ") must be positive");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4, "AdaptiveAvgPool2d expects NHWC [N, H, W, C], got ", x.str());
  if (oh_ == 1 && ow_ == 1) return ops::reshape(ops::global_avg_pool(x), {x.size(0), 1, 1, x.size(3)});
  if (x.size(1) == oh_ && x.size(2) == ow_) return x;  // every window is one cell: identity
  return ops::adaptive_avg_pool2d(x, oh_, ow_);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=(" + std::to_string(oh_) + ", " + std::to_string(ow_) + ")";
}

}  // namespace tandem
