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

// features.N as torchvision's make_layers numbers them; each Conv2d -> ReLU pair (no BN) runs as one
// fused op (ConvReluSequential, features_classifier.h).
std::shared_ptr<Sequential> features(const VGGConfig& cfg) {
  auto f = std::make_shared<ConvReluSequential>();
  int64_t in = 3;
  for (int v : vgg_cfg(cfg.depth)) {
    if (v == M) {
      f->add(std::make_shared<MaxPool2d>(2, 2));
      continue;
    }
    Conv2dOptions o;
    o.padding = 1;
    f->add(std::make_shared<Conv2d>(in, v, 3, o, nullptr));
    if (cfg.batch_norm) f->add(std::make_shared<BatchNorm2d>(v));
    f->add(std::make_shared<ReLU>());
    in = v;
  }
  return f;
}

std::shared_ptr<Sequential> classifier(const VGGConfig& cfg) {
  TANDEM_CHECK(cfg.num_classes > 0, "VGG: num_classes must be positive, got ", cfg.num_classes);
  return fc_head(512 * 7 * 7, cfg.num_classes, cfg.dropout, DropoutAt::AfterReLU);
}
}  // namespace

VGG::VGG(const VGGConfig& cfg, uint64_t seed, bool init) : FeaturesClassifier(features(cfg), 7, classifier(cfg)) {
  if (init) {
    Generator gen(seed);
    init::vgg_init(*this, gen);
  }
}

}  // namespace tandem::models
