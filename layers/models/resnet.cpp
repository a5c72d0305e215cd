// layers/models/resnet.cpp: torchvision's ResNet (v1.5) on NHWC tensors.
//
// Every BN is followed by a ReLU, alone or after the residual add, and runs with it as one op:
// BatchNorm2d::forward_relu (the stem, every stage of a block but the last) and forward_add_relu
// (the last stage), so a GPU training step has no separate ReLU pass either way. The "relu"
// children stay registered for torchvision's module tree (describe(), hooks on the tree), but their
// forward is not called.
#include "layers/models/resnet.h"

#include "core/backend.h"
#include "layers/init.h"

namespace tandem::models {
namespace {
// Models construct without drawing (gen = nullptr) and run one init pass at the end.
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int k, int stride) {
  Conv2dOptions o;
  o.stride = stride;
  o.padding = k / 2;
  o.bias = false;
  return std::make_shared<Conv2d>(in, out, k, o, nullptr);
}
// Conv -> BN -> ReLU with the BN statistics from the conv's epilogue and, inside a block, the BN +
// ReLU in the next conv's prologue (BackendConfig::conv_bn_fusion, core/ops/conv_bn/conv_bn.h), in
// training mode; block tails keep forward_add_relu, the stem (a maxpool follows) batch_norm_apply.
bool conv_bn_fusion(const Module& m) { return m.is_training() && backend().conv_bn_fusion; }
}  // namespace

ResidualBlock::ResidualBlock(const std::vector<Stage>& stages, size_t relu_after,
                             std::shared_ptr<Sequential> downsample) {
  TANDEM_CHECK(relu_after >= 1 && relu_after <= stages.size(), "ResidualBlock: relu_after=", relu_after,
               " must name one of the ", stages.size(), " stages");
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    const std::string n = std::to_string(i + 1);
    convs_.push_back(register_module("conv" + n, conv(s.in, s.out, s.kernel, s.stride)));
    bns_.push_back(register_module("bn" + n, std::make_shared<BatchNorm2d>(s.out)));
    if (i + 1 == relu_after) relu_ = register_module("relu", std::make_shared<ReLU>());
  }
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

Tensor ResidualBlock::forward(const Tensor& x) {
  const size_t last = convs_.size() - 1;
  Tensor tail;
  bool prologue = conv_bn_fusion(*this);  // and every inner BN a plain BatchNorm2d (not SyncBatchNorm)
  for (size_t i = 0; i < last; ++i) prologue = prologue && bns_[i]->takes_conv_stats();
  if (prologue) {
    // The conv-BN fusion: each inner BN's statistics from its conv's epilogue, its scale, bias and
    // ReLU in the next conv's prologue, so no inner BN output is written.
    ops::ConvGenstats cs = convs_[0]->forward_genstats(x);
    for (size_t i = 1; i <= last; ++i) cs = convs_[i]->forward_genstats(bns_[i - 1]->relu_prologue(cs));
    tail = cs.y;  // (its statistics unused: forward_add_relu computes its own)
  } else {
    Tensor out = x;
    for (size_t i = 0; i < last; ++i) out = bns_[i]->forward_relu(convs_[i](out));  // relu(bn(conv(out))), one op
    tail = convs_[last](out);
  }
  Tensor identity = downsample_ ? downsample_(x) : x;
  // relu(bn(tail) + identity) as one op: cuDNN's fused BN+add+ReLU on the GPU (BatchNorm2d).
  return bns_[last]->forward_add_relu(tail, identity);
}

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int stride, std::shared_ptr<Sequential> downsample)
    : ResidualBlock({{inplanes, planes, 3, stride}, {planes, planes, 3, 1}}, 1, std::move(downsample)) {}

// width = planes: groups = 1 and base_width = 64 in every model built here.
Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int stride, std::shared_ptr<Sequential> downsample)
    : ResidualBlock({{inplanes, planes, 1, 1}, {planes, planes, 3, stride}, {planes, planes * kExpansion, 1, 1}}, 3,
                    std::move(downsample)) {}

ResNet::ResNet(const ResNetConfig& cfg, uint64_t seed, bool init) : cfg_(cfg), inplanes_(cfg.stem_width) {
  TANDEM_CHECK(cfg.num_classes > 0, "ResNet: num_classes must be positive, got ", cfg.num_classes);
  conv1_ = register_module("conv1", conv(3, cfg.stem_width, 7, 2));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(cfg.stem_width));
  relu_ = register_module("relu", std::make_shared<ReLU>());
  maxpool_ = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  for (int i = 0; i < 4; ++i)
    layers_[i] = register_module("layer" + std::to_string(i + 1),
                                 make_layer(cfg.widths[i], cfg.layers[i], i == 0 ? 1 : 2));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  fc_ = register_module("fc", std::make_shared<Linear>(inplanes_, cfg.num_classes, true, nullptr));
  if (init) {
    Generator gen(seed);
    init::resnet_init(*this, gen, cfg.zero_init_residual);
  }
}

std::shared_ptr<Sequential> ResNet::make_layer(int64_t planes, int blocks, int stride) {
  const int expansion = cfg_.block == BlockKind::Basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  auto make_block = [&](int64_t in, int s, std::shared_ptr<Sequential> ds) -> ModulePtr {
    if (cfg_.block == BlockKind::Basic) return std::make_shared<BasicBlock>(in, planes, s, ds);
    return std::make_shared<Bottleneck>(in, planes, s, ds);
  };
  std::shared_ptr<Sequential> downsample;
  if (stride != 1 || inplanes_ != planes * expansion) {
    downsample = std::make_shared<Sequential>();
    downsample->add(conv(inplanes_, planes * expansion, 1, stride));
    downsample->add(std::make_shared<BatchNorm2d>(planes * expansion));
  }
  auto layer = std::make_shared<Sequential>();
  layer->add(make_block(inplanes_, stride, downsample));
  inplanes_ = planes * expansion;
  for (int i = 1; i < blocks; ++i) layer->add(make_block(inplanes_, 1, nullptr));
  return layer;
}

Tensor ResNet::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4 && x.size(3) == 3, "ResNet expects NHWC images [N, H, W, 3], got ", x.str());
  Tensor h = maxpool_(conv_bn_fusion(*this) ? bn1_->forward_relu_from_stats(conv1_->forward_genstats(x))
                                            : bn1_->forward_relu(conv1_(x)));  // relu(bn1(conv1(x))) as one op
  for (const auto& layer : layers_) h = layer(h);
  return fc_(flatten_(avgpool_(h)));
}

ResNetConfig resnet_config(int depth, int num_classes) {
  ResNetConfig c;
  c.num_classes = num_classes;
  switch (depth) {
    case 18: c.block = BlockKind::Basic; c.layers = {2, 2, 2, 2}; break;
    case 34: c.block = BlockKind::Basic; c.layers = {3, 4, 6, 3}; break;
    case 50: c.block = BlockKind::Bottleneck; c.layers = {3, 4, 6, 3}; break;
    case 101: c.block = BlockKind::Bottleneck; c.layers = {3, 4, 23, 3}; break;
    case 152: c.block = BlockKind::Bottleneck; c.layers = {3, 8, 36, 3}; break;
    default: TANDEM_THROW("resnet depth ", depth, " is not one of 18, 34, 50, 101, 152");
  }
  return c;
}

ResNetConfig resnet_tiny_config(int num_classes) {
  ResNetConfig c;
  c.block = BlockKind::Basic;
  c.layers = {1, 1, 1, 1};
  c.widths = {16, 32, 64, 128};
  c.stem_width = 16;
  c.num_classes = num_classes;
  return c;
}

}  // namespace tandem::models
