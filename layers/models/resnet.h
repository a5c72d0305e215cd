// layers/models/resnet.h: ResNet-18/34/50/101/152 as torchvision builds them, plus resnet_tiny.
//
// Structure and names are torchvision's (torchvision/models/resnet.py), ResNet v1.5: in a
// Bottleneck the stride sits on the 3x3 conv (conv2), not the first 1x1. Names:
//   conv1, bn1, layer{1..4}.{i}.conv1/bn1/conv2/bn2[/conv3/bn3], layer{k}.0.downsample.0 (1x1 conv,
//   no bias) and .downsample.1 (BN), fc.weight, fc.bias - so parameter counts and state-dict names
//   match torchvision exactly. Input NHWC [N, H, W, 3]; output logits [N, num_classes].
//
// resnet_tiny: the same code with BasicBlocks [1, 1, 1, 1] and widths 16/32/64/128 (stem 16): 0.31 M
// parameters plus the classifier (129 * num_classes). With the 7x7/2 stem and max-pool a 64x64 image
// reaches layer1 at 16x16 and layer4 at 2x2, so it trains on a CPU in minutes (the README's main job).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "layers/layers.h"

namespace tandem::models {

enum class BlockKind { Basic, Bottleneck };

struct ResNetConfig {
  BlockKind block = BlockKind::Basic;
  std::array<int, 4> layers{2, 2, 2, 2};         // blocks per stage (resnet18)
  std::array<int64_t, 4> widths{64, 128, 256, 512};  // "planes" of each stage
  int64_t stem_width = 64;                       // conv1's output channels
  int num_classes = 1000;
  bool zero_init_residual = false;               // torchvision's flag (see layers/init.h)
};

// What BasicBlock and Bottleneck share: a chain of conv-BN stages with ReLU between them, the
// shortcut (identity, or `downsample` when the shape changes) added to the last stage's output,
// then ReLU. The two blocks differ only in their stages. Each BN runs with its ReLU as one op: the
// inner stages' BatchNorm2d::forward_relu, and the last BN, the add and the ReLU in forward_add_relu
// (fused by cuDNN on the GPU, composed elsewhere).
class ResidualBlock : public Module {
 public:
  Tensor forward(const Tensor& x) override;

 protected:
  struct Stage {
    int64_t in, out;
    int kernel, stride;
  };
  // Registers conv{i}/bn{i} (1-based, bias-free convs with padding kernel/2) for each stage, "relu"
  // after the first `relu_after` stages, then "downsample" if given: torchvision's attribute order,
  // which describe() prints.
  ResidualBlock(const std::vector<Stage>& stages, size_t relu_after, std::shared_ptr<Sequential> downsample);

 private:
  std::vector<Child<Conv2d>> convs_;
  std::vector<Child<BatchNorm2d>> bns_;
  Child<ReLU> relu_;
  Child<Sequential> downsample_;  // empty when the shortcut is the identity
};

// conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU. expansion 1.
class BasicBlock : public ResidualBlock {
 public:
  static constexpr int kExpansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int stride, std::shared_ptr<Sequential> downsample);
  std::string type_name() const override { return "BasicBlock"; }
};

// 1x1 (width) - 3x3 stride (width) - 1x1 (planes * 4), v1.5. expansion 4.
class Bottleneck : public ResidualBlock {
 public:
  static constexpr int kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int stride, std::shared_ptr<Sequential> downsample);
  std::string type_name() const override { return "Bottleneck"; }
};

class ResNet : public Module {
 public:
  // Builds and initialises (torchvision's scheme, layers/init.h) from `seed`; init = false leaves
  // conv/linear weights uninitialised (for counting or right before loading a checkpoint).
  ResNet(const ResNetConfig& cfg, uint64_t seed, bool init = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ResNet"; }

 private:
  std::shared_ptr<Sequential> make_layer(int64_t planes, int blocks, int stride);
  ResNetConfig cfg_;
  int64_t inplanes_;
  Child<Conv2d> conv1_;
  Child<BatchNorm2d> bn1_;
  Child<ReLU> relu_;
  Child<MaxPool2d> maxpool_;
  std::array<Child<Sequential>, 4> layers_;  // layer1..layer4
  Child<AdaptiveAvgPool2d> avgpool_;
  Flatten flatten_;  // not a child: torchvision calls torch.flatten in forward
  Child<Linear> fc_;
};

ResNetConfig resnet_config(int depth, int num_classes);  // depth in {18, 34, 50, 101, 152}
ResNetConfig resnet_tiny_config(int num_classes);

}  // namespace tandem::models
