// layers/models/alexnet.h: AlexNet as torchvision builds it (the "one weird trick" variant).
//
// features: Conv2d(3, 64, 11, stride 4, pad 2) ReLU MaxPool(3, 2) Conv2d(64, 192, 5, pad 2) ReLU
// MaxPool(3, 2) Conv2d(192, 384, 3, pad 1) ReLU Conv2d(384, 256, 3, pad 1) ReLU Conv2d(256, 256, 3,
// pad 1) ReLU MaxPool(3, 2)  (indices 0..12: convs at 0, 3, 6, 8, 10);
// avgpool: AdaptiveAvgPool2d((6, 6)); classifier: Dropout, Linear(9216, 4096), ReLU, Dropout,
// Linear(4096, 4096), ReLU, Linear(4096, num_classes) (linears at 1, 4, 6).
// Skeleton and head: layers/models/features_classifier.h.
// Init: PyTorch's module defaults (torchvision does not override them). NHWC in, logits out.
#pragma once
#include <cstdint>
#include <memory>

#include "layers/models/features_classifier.h"

namespace tandem::models {

using AlexNetConfig = ClassifierConfig;  // the head's settings are AlexNet's only ones

class AlexNet : public FeaturesClassifier {
 public:
  AlexNet(const AlexNetConfig& cfg, uint64_t seed, bool init = true);
  std::string type_name() const override { return "AlexNet"; }
};

}  // namespace tandem::models
