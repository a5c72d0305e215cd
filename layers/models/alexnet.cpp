// layers/models/alexnet.cpp: torchvision's AlexNet on NHWC tensors.
#include "layers/models/alexnet.h"

#include "layers/init.h"

namespace tandem::models {
namespace {
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int k, int stride, int pad) {
  Conv2dOptions o;
  o.stride = stride;
  o.padding = pad;
  return std::make_shared<Conv2d>(in, out, k, o, nullptr);
}

// Each Conv2d -> ReLU pair runs as one fused op (ConvReluSequential, features_classifier.h).
std::shared_ptr<Sequential> features() {
  return std::make_shared<ConvReluSequential>(std::vector<ModulePtr>{
      conv(3, 64, 11, 4, 2), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      conv(64, 192, 5, 1, 2), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      conv(192, 384, 3, 1, 1), std::make_shared<ReLU>(),
      conv(384, 256, 3, 1, 1), std::make_shared<ReLU>(),
      conv(256, 256, 3, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2)});
}

std::shared_ptr<Sequential> classifier(const AlexNetConfig& cfg) {
  TANDEM_CHECK(cfg.num_classes > 0, "AlexNet: num_classes must be positive, got ", cfg.num_classes);
  return fc_head(256 * 6 * 6, cfg.num_classes, cfg.dropout, DropoutAt::BeforeLinear);
}
}  // namespace

AlexNet::AlexNet(const AlexNetConfig& cfg, uint64_t seed, bool init)
    : FeaturesClassifier(features(), 6, classifier(cfg)) {
  if (init) {
    Generator gen(seed);
    init::default_init(*this, gen);
  }
}

}  // namespace tandem::models
