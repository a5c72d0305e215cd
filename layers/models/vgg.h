// layers/models/vgg.h: VGG-11/13/16/19 with and without batch norm, as torchvision builds them.
//
// features.N indices follow torchvision's make_layers exactly: each conv is Conv2d(3x3, padding 1,
// bias) [+ BatchNorm2d] + ReLU, each "M" a MaxPool2d(2, 2), so e.g. vgg16's last conv is
// features.28 and vgg16_bn's is features.40. Then avgpool = AdaptiveAvgPool2d((7, 7)), flatten, and
// classifier = Linear(512*7*7, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout,
// Linear(4096, num_classes) (indices 0..6). The flatten emits PyTorch's (C, H, W) order, so
// classifier.0.weight has torchvision's layout (layers/models/features_classifier.h).
// Init: torchvision's VGG scheme (layers/init.h). Input NHWC [N, H, W, 3], output [N, num_classes].
#pragma once
#include <cstdint>
#include <memory>

#include "layers/models/features_classifier.h"

namespace tandem::models {

struct VGGConfig : ClassifierConfig {
  int depth = 16;  // 11, 13, 16 or 19 (configurations A, B, D, E of the paper)
  bool batch_norm = false;
};

class VGG : public FeaturesClassifier {
 public:
  VGG(const VGGConfig& cfg, uint64_t seed, bool init = true);
  std::string type_name() const override { return "VGG"; }
};

}  // namespace tandem::models
