// layers/conv2d.cpp: Conv2d over NHWC with OHWI weights (see layers.h for the checkpoint note).
#include <cmath>

#include "core/profile.h"
#include "layers/init.h"
#include "layers/layers.h"

namespace tandem {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, Conv2dOptions opt, Generator* gen)
    : in_(in_channels), out_(out_channels), k_(kernel_size), opt_(opt) {
  TANDEM_CHECK(in_ > 0 && out_ > 0 && k_ > 0 && opt_.stride > 0 && opt_.dilation > 0 && opt_.padding >= 0,
               "Conv2d(", in_, ", ", out_, ", kernel_size=", k_, ", stride=", opt_.stride, ", padding=",
               opt_.padding, "): sizes and stride must be positive, padding non-negative");
  TANDEM_CHECK(opt_.groups > 0 && in_ % opt_.groups == 0 && out_ % opt_.groups == 0, "Conv2d: groups=",
               opt_.groups, " must divide in_channels=", in_, " and out_channels=", out_);
  weight_ = register_parameter("weight", Tensor::empty({out_, k_, k_, in_ / opt_.groups}));
  if (opt_.bias) bias_ = register_parameter("bias", Tensor::empty({out_}));
  if (gen) reset_parameters(*gen);
}

void Conv2d::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight_, fan_in(), init::gain_leaky_relu(std::sqrt(5.0)), gen);
  if (bias_.defined()) init::default_bias_(bias_, fan_in(), gen);
}

ops::Conv2dParams Conv2d::params(const Tensor& x) const {
  TANDEM_CHECK(x.dim() == 4 && x.size(3) == in_, "Conv2d(", in_, ", ", out_, "): expects NHWC input [N, H, W, ",
               in_, "], got ", x.str());
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = opt_.stride;
  p.pad_h = p.pad_w = opt_.padding;
  p.dilation_h = p.dilation_w = opt_.dilation;
  p.groups = opt_.groups;
  return p;
}

Tensor Conv2d::forward(const Tensor& x) { return ops::conv2d(x, weight_, bias_, params(x)); }

Tensor Conv2d::forward_relu(const Tensor& x) {
  // Module::operator()'s range and hooks (ZeRO-3 gathers the weight in a pre-hook): the timeline
  // shows this conv, with the ReLU inside it now.
  std::string label = name().empty() ? type_name() : type_name() + " " + name();
  profile::Range range(label.c_str(), profile::Level::Layer);
  return call([&] { return ops::conv2d_bias_relu(x, weight_, bias_, params(x)); });
}

ops::ConvGenstats Conv2d::forward_genstats(const Tensor& x) {
  TANDEM_CHECK(!bias_.defined(), "Conv2d::forward_genstats: a conv followed by BatchNorm has no bias (bias=False)");
  std::string label = name().empty() ? type_name() : type_name() + " " + name();
  profile::Range range(label.c_str(), profile::Level::Layer);
  return call([&] { return ops::conv2d_genstats(x, weight_, params(x)); });
}

ops::ConvGenstats Conv2d::forward_genstats(const ops::BnReluInput& in) {
  TANDEM_CHECK(!bias_.defined(), "Conv2d::forward_genstats: a conv followed by BatchNorm has no bias (bias=False)");
  std::string label = name().empty() ? type_name() : type_name() + " " + name();
  profile::Range range(label.c_str(), profile::Level::Layer);
  return call([&] { return ops::conv2d_bn_relu_genstats(in, weight_, params(in.x)); });
}

std::string Conv2d::extra_repr() const {
  auto pair = [](int v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; };
  std::string s = std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair(k_) +
                  ", stride=" + pair(opt_.stride);
  if (opt_.padding != 0) s += ", padding=" + pair(opt_.padding);
  if (opt_.dilation != 1) s += ", dilation=" + pair(opt_.dilation);
  if (opt_.groups != 1) s += ", groups=" + std::to_string(opt_.groups);
  if (!opt_.bias) s += ", bias=False";
  return s;
}

}  // namespace tandem
