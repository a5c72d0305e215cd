// layers/models/models.h: build any model by name (what the apps' model choice calls).
//
// Names: resnet18 resnet34 resnet50 resnet101 resnet152 vgg11 vgg11_bn vgg13 vgg13_bn vgg16
// vgg16_bn vgg19 vgg19_bn alexnet (torchvision's architectures, names and parameter counts), and
// BERT encoders with a masked-LM head, bert_tiny bert_mini bert_small bert_medium bert_base bert_large
// (layers/models/bert.h; for these num_classes is the vocabulary size and the input is token ids
// [B, S]), and two small models for CPU work and tests:
//   resnet_tiny  ResNet with BasicBlocks [1, 1, 1, 1], widths 16..128 (layers/models/resnet.h)
//   small_cnn    3 x (Conv3x3-BN-ReLU), max-pools after the first two, global average pool, Linear:
//                16/32/64 channels, ~24 K parameters; learns simple 16x16-64x64 image tasks in
//                seconds on a CPU (the end-to-end test).
//   small_cnn_nobn  the same without BatchNorm (convs with a bias): no per-rank batch statistics.
// Every model takes NHWC images [N, H, W, 3] and returns logits [N, num_classes], starts in training
// mode on the CPU in f32, and is initialised from `seed` alone (identical on every rank).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/module.h"

namespace tandem::models {

struct ModelOptions {
  // false: skip the random init - conv/linear weights are left UNINITIALISED (BN at weight 1, bias 0).
  // Only for counting parameters or immediately loading a checkpoint, where drawing and writing
  // 100 M+ values would be wasted time.
  bool init = true;
  bool zero_init_residual = false;  // ResNets only (torchvision's flag; layers/init.h)
  double dropout = 0.5;             // VGG/AlexNet classifier dropout (torchvision's default)
};

// Throws with the list of valid names when `name` is unknown.
ModulePtr create_model(const std::string& name, int num_classes, uint64_t seed);
ModulePtr create_model(const std::string& name, int num_classes, uint64_t seed, const ModelOptions& opt);
std::vector<std::string> model_names();

// Three conv-BN-ReLU blocks, pooling and a linear head (24 k parameters at 4 classes): the tests'
// model. batchnorm = false ("small_cnn_nobn": conv with a bias, then ReLU) has no per-rank batch
// statistics, so N ranks x batch b compute what one rank x batch N*b does, up to rounding (the
// resume tests across world sizes use it).
ModulePtr small_cnn(int num_classes, uint64_t seed, bool init = true, bool batchnorm = true);

}  // namespace tandem::models
