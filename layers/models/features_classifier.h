// layers/models/features_classifier.h: the skeleton torchvision's AlexNet and VGG share.
//
// forward: features (the conv stack) -> avgpool (AdaptiveAvgPool2d to a fixed grid, so the
// classifier's input width does not depend on the image size) -> flatten -> classifier. Children
// are "features", "avgpool", "classifier", registered in that order (torchvision's names and
// order). The flatten is not a child: torchvision calls torch.flatten in forward. It emits
// PyTorch's (C, H, W) order, so classifier weights have torchvision's layout (layers/layers.h).
//
// ConvReluSequential holds their features.
// fc_head builds both classifiers: two hidden Linear(.., 4096) + ReLU layers with dropout, then
// Linear(4096, num_classes). The models differ only in where the dropout sits.
// Linears are built uninitialised (gen = nullptr): the model runs its init scheme afterwards.
#pragma once
#include <cstdint>
#include <memory>

#include "layers/layers.h"

namespace tandem::models {

// The head's settings every such model takes (AlexNetConfig is this; VGGConfig adds its own).
struct ClassifierConfig {
  int num_classes = 1000;
  double dropout = 0.5;  // torchvision's default
};

class FeaturesClassifier : public Module {
 public:
  // Checks for NHWC images [N, H, W, 3] and names the model (type_name()) when they are not.
  Tensor forward(const Tensor& x) override;

 protected:
  // `pool` is avgpool's square output size (AlexNet 6, VGG 7).
  FeaturesClassifier(std::shared_ptr<Sequential> features, int pool, std::shared_ptr<Sequential> classifier);

 private:
  Child<Sequential> features_;
  Child<AdaptiveAvgPool2d> avgpool_;
  Child<Sequential> classifier_;
  Flatten flatten_;
};

// The conv stack of AlexNet and VGG: a Sequential (same children, names and printout) whose forward
// runs each Conv2d directly followed by a ReLU as one fused op (Conv2d::forward_relu: one cuDNN graph
// forward, the mask and bias gradient in one backward pass), with the same values and gradients.
// The ReLU child stays, so state-dict indices are torchvision's, but it is not called: hooks on it
// do not run (the conv's do). Other children (pools, BatchNorm2d in the _bn variants) run as usual.
class ConvReluSequential : public Sequential {
 public:
  using Sequential::Sequential;
  Tensor forward(const Tensor& x) override;
};

enum class DropoutAt {
  BeforeLinear,  // AlexNet: Dropout, Linear, ReLU (x2), Linear
  AfterReLU,     // VGG:     Linear, ReLU, Dropout (x2), Linear
};
std::shared_ptr<Sequential> fc_head(int64_t in_features, int num_classes, double dropout, DropoutAt where);

}  // namespace tandem::models
