// layers/init.cpp: torch.nn.init formulas and torchvision's model init schemes.
#include "layers/init.h"

#include <cmath>

#include "layers/layers.h"

namespace tandem::init {

double gain_relu() { return std::sqrt(2.0); }
double gain_leaky_relu(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }

void kaiming_uniform_(Tensor& w, int64_t fan, double gain, Generator& gen) {
  TANDEM_CHECK(fan > 0, "kaiming_uniform_: fan must be positive, got ", fan, " for ", w.str());
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fan));
  uniform_(w, -bound, bound, gen);
}

void kaiming_normal_(Tensor& w, int64_t fan, double gain, Generator& gen) {
  TANDEM_CHECK(fan > 0, "kaiming_normal_: fan must be positive, got ", fan, " for ", w.str());
  normal_(w, 0.0, gain / std::sqrt(static_cast<double>(fan)), gen);
}

void default_bias_(Tensor& b, int64_t fan_in, Generator& gen) {
  double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  uniform_(b, -bound, bound, gen);
}

namespace {
// The conv init ResNet and VGG share (torchvision): kaiming_normal_(mode="fan_out", relu), bias 0.
void conv_fan_out_init(Conv2d& conv, Generator& gen) {
  Tensor w = conv.weight();
  kaiming_normal_(w, conv.fan_out(), gain_relu(), gen);
  if (Tensor b = conv.bias(); b.defined()) b.zero_();
}
}  // namespace

void default_init(Module& model, Generator& gen) {
  for (auto& [_, m] : model.named_modules()) m->reset_parameters(gen);
}

void resnet_init(Module& model, Generator& gen, bool zero_init_residual) {
  for (auto& [name, m] : model.named_modules()) {
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      conv_fan_out_init(*conv, gen);
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      bn->reset_parameters(gen);  // weight 1, bias 0
    } else {
      m->reset_parameters(gen);   // Linear (fc) keeps PyTorch's default
    }
  }
  if (!zero_init_residual) return;
  for (auto& [name, m] : model.named_modules()) {
    const std::string type = m->type_name();
    const char* last_bn = type == "BasicBlock" ? "bn2" : type == "Bottleneck" ? "bn3" : nullptr;
    if (!last_bn) continue;
    for (auto& [child_name, child] : m->named_children())
      if (child_name == last_bn) {
        Tensor w = dynamic_cast<BatchNorm2d&>(*child).weight();
        w.zero_();
      }
  }
}

void vgg_init(Module& model, Generator& gen) {
  for (auto& [_, m] : model.named_modules()) {
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      conv_fan_out_init(*conv, gen);
    } else if (auto* lin = dynamic_cast<Linear*>(m)) {
      Tensor w = lin->weight();
      normal_(w, 0.0, 0.01, gen);
      if (Tensor b = lin->bias(); b.defined()) b.zero_();
    } else {
      m->reset_parameters(gen);  // BatchNorm2d: weight 1, bias 0
    }
  }
}

}  // namespace tandem::init
