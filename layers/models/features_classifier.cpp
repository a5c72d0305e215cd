// layers/models/features_classifier.cpp: the AlexNet/VGG skeleton and their classifier head.
#include "layers/models/features_classifier.h"

namespace tandem::models {

FeaturesClassifier::FeaturesClassifier(std::shared_ptr<Sequential> features, int pool,
                                       std::shared_ptr<Sequential> classifier) {
  features_ = register_module("features", std::move(features));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(pool, pool));
  classifier_ = register_module("classifier", std::move(classifier));
}

Tensor FeaturesClassifier::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4 && x.size(3) == 3, type_name(), " expects NHWC images [N, H, W, 3], got ", x.str());
  return classifier_(flatten_(avgpool_(features_(x))));
}

Tensor ConvReluSequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    auto* conv = dynamic_cast<Conv2d*>((*this)[i].get());
    if (conv && i + 1 < size() && dynamic_cast<ReLU*>((*this)[i + 1].get())) {
      h = conv->forward_relu(h);
      ++i;  // the ReLU ran inside the conv
    } else {
      h = (*(*this)[i])(h);
    }
  }
  return h;
}

std::shared_ptr<Sequential> fc_head(int64_t in_features, int num_classes, double dropout, DropoutAt where) {
  constexpr int64_t kHidden = 4096;  // both papers' fully connected width
  auto head = std::make_shared<Sequential>();
  int64_t in = in_features;
  for (int i = 0; i < 2; ++i) {
    if (where == DropoutAt::BeforeLinear) head->add(std::make_shared<Dropout>(dropout));
    head->add(std::make_shared<Linear>(in, kHidden, true, nullptr));
    head->add(std::make_shared<ReLU>());
    if (where == DropoutAt::AfterReLU) head->add(std::make_shared<Dropout>(dropout));
    in = kHidden;
  }
  head->add(std::make_shared<Linear>(in, num_classes, true, nullptr));
  return head;
}

}  // namespace tandem::models
