// layers/models/vgg.cpp: torchvision's VGG on NHWC tensors.
#include "layers/models/vgg.h"

#include <vector>

#include "layers/init.h"

namespace tandem::models {
namespace {
constexpr int M = -1;  // a max-pool in the configuration lists below

// torchvision's cfgs "A", "B", "D", "E" (Simonyan & Zisserman, Table 1).
std::vector<int> vgg_cfg(int depth) {
  switch (depth) {
    case 11: return {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 13: return {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
    case 16: return {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
    case 19:
      return {64, 64, M, 128, 128, M, 256, 256, 256, 256, M, 512, 512, 512, 512, M, 512, 512, 512, 512, M};
    default: TANDEM_THROW("vgg depth ", depth, " is not one of 11, 13, 16, 19");
  }
}
}  // namespace

VGG::VGG(const VGGConfig& cfg, uint64_t seed, bool init) {
  TANDEM_CHECK(cfg.num_classes > 0, "VGG: num_classes must be positive, got ", cfg.num_classes);
  features_ = std::make_shared<Sequential>();
  int64_t in = 3;
  for (int v : vgg_cfg(cfg.depth)) {
    if (v == M) {
      features_->add(std::make_shared<MaxPool2d>(2, 2));
      continue;
    }
    Conv2dOptions o;
    o.padding = 1;
    features_->add(std::make_shared<Conv2d>(in, v, 3, o, nullptr));
    if (cfg.batch_norm) features_->add(std::make_shared<BatchNorm2d>(v));
    features_->add(std::make_shared<ReLU>());
    in = v;
  }
  register_module("features", features_);
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(7, 7));
  flatten_ = std::make_shared<Flatten>();
  classifier_ = std::make_shared<Sequential>();
  classifier_->add(std::make_shared<Linear>(512 * 7 * 7, 4096, true, nullptr));
  classifier_->add(std::make_shared<ReLU>());
  classifier_->add(std::make_shared<Dropout>(cfg.dropout));
  classifier_->add(std::make_shared<Linear>(4096, 4096, true, nullptr));
  classifier_->add(std::make_shared<ReLU>());
  classifier_->add(std::make_shared<Dropout>(cfg.dropout));
  classifier_->add(std::make_shared<Linear>(4096, cfg.num_classes, true, nullptr));
  register_module("classifier", classifier_);
  if (init) {
    Generator gen(seed);
    init::vgg_init(*this, gen);
  }
}

Tensor VGG::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4 && x.size(3) == 3, "VGG expects NHWC images [N, H, W, 3], got ", x.str());
  return (*classifier_)((*flatten_)((*avgpool_)((*features_)(x))));
}

}  // namespace tandem::models
