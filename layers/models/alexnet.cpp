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
}  // namespace

AlexNet::AlexNet(const AlexNetConfig& cfg, uint64_t seed, bool init) {
  TANDEM_CHECK(cfg.num_classes > 0, "AlexNet: num_classes must be positive, got ", cfg.num_classes);
  features_ = std::make_shared<Sequential>(std::vector<ModulePtr>{
      conv(3, 64, 11, 4, 2), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      conv(64, 192, 5, 1, 2), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      conv(192, 384, 3, 1, 1), std::make_shared<ReLU>(),
      conv(384, 256, 3, 1, 1), std::make_shared<ReLU>(),
      conv(256, 256, 3, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2)});
  register_module("features", features_);
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(6, 6));
  flatten_ = std::make_shared<Flatten>();
  classifier_ = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Dropout>(cfg.dropout), std::make_shared<Linear>(256 * 6 * 6, 4096, true, nullptr),
      std::make_shared<ReLU>(), std::make_shared<Dropout>(cfg.dropout),
      std::make_shared<Linear>(4096, 4096, true, nullptr), std::make_shared<ReLU>(),
      std::make_shared<Linear>(4096, cfg.num_classes, true, nullptr)});
  register_module("classifier", classifier_);
  if (init) {
    Generator gen(seed);
    init::default_init(*this, gen);
  }
}

Tensor AlexNet::forward(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4 && x.size(3) == 3, "AlexNet expects NHWC images [N, H, W, 3], got ", x.str());
  return (*classifier_)((*flatten_)((*avgpool_)((*features_)(x))));
}

}  // namespace tandem::models
