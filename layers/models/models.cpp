// layers/models/models.cpp: the name -> model factory and small_cnn.
#include "layers/models/models.h"

#include <functional>

#include "layers/init.h"
#include "layers/layers.h"
#include "layers/models/alexnet.h"
#include "layers/models/bert.h"
#include "layers/models/resnet.h"
#include "layers/models/vgg.h"

namespace tandem::models {
namespace {

// Ordered like model_names() reports them: torchvision's families, then the small ones.
using Builder = std::function<ModulePtr(int, uint64_t, const ModelOptions&)>;
const std::vector<std::pair<std::string, Builder>>& registry() {
  static const std::vector<std::pair<std::string, Builder>> r = [] {
    std::vector<std::pair<std::string, Builder>> v;
    for (int depth : {18, 34, 50, 101, 152}) {
      v.emplace_back("resnet" + std::to_string(depth), [depth](int nc, uint64_t seed, const ModelOptions& o) {
        ResNetConfig c = resnet_config(depth, nc);
        c.zero_init_residual = o.zero_init_residual;
        return std::make_shared<ResNet>(c, seed, o.init);
      });
    }
    for (int depth : {11, 13, 16, 19}) {
      for (bool bn : {false, true}) {
        v.emplace_back("vgg" + std::to_string(depth) + (bn ? "_bn" : ""),
                       [depth, bn](int nc, uint64_t seed, const ModelOptions& o) {
                         VGGConfig c{{nc, o.dropout}, depth, bn};
                         return std::make_shared<VGG>(c, seed, o.init);
                       });
      }
    }
    v.emplace_back("alexnet", [](int nc, uint64_t seed, const ModelOptions& o) {
      return std::make_shared<AlexNet>(AlexNetConfig{nc, o.dropout}, seed, o.init);
    });
    for (const char* bert : {"bert_tiny", "bert_mini", "bert_small", "bert_medium", "bert_base", "bert_large"}) {
      // For the encoders num_classes is the vocabulary size (the MLM head's outputs).
      v.emplace_back(bert, [name = std::string(bert)](int vocab, uint64_t seed, const ModelOptions& o) {
        return std::make_shared<BertForMaskedLM>(bert_config(name, vocab), seed, o.init);
      });
    }
    v.emplace_back("resnet_tiny", [](int nc, uint64_t seed, const ModelOptions& o) {
      ResNetConfig c = resnet_tiny_config(nc);
      c.zero_init_residual = o.zero_init_residual;
      return std::make_shared<ResNet>(c, seed, o.init);
    });
    v.emplace_back("small_cnn",
                   [](int nc, uint64_t seed, const ModelOptions& o) { return small_cnn(nc, seed, o.init); });
    v.emplace_back("small_cnn_nobn", [](int nc, uint64_t seed, const ModelOptions& o) {
      return small_cnn(nc, seed, o.init, /*batchnorm=*/false);
    });
    return v;
  }();
  return r;
}

std::shared_ptr<Module> conv_bn_relu(Sequential& s, int64_t in, int64_t out, bool batchnorm) {
  Conv2dOptions o;
  o.padding = 1;
  o.bias = !batchnorm;  // BN follows: a conv bias would be cancelled by the mean subtraction
  s.add(std::make_shared<Conv2d>(in, out, 3, o, nullptr));
  if (batchnorm) s.add(std::make_shared<BatchNorm2d>(out));
  return s.add(std::make_shared<ReLU>());
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [n, _] : registry()) names.push_back(n);
  return names;
}

ModulePtr create_model(const std::string& name, int num_classes, uint64_t seed) {
  return create_model(name, num_classes, seed, ModelOptions{});
}

ModulePtr create_model(const std::string& name, int num_classes, uint64_t seed, const ModelOptions& opt) {
  TANDEM_CHECK(num_classes > 0, "create_model(\"", name, "\"): num_classes must be positive, got ", num_classes);
  for (const auto& [n, build] : registry())
    if (n == name) return build(num_classes, seed, opt);
  std::string valid;
  for (const auto& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
  TANDEM_THROW("unknown model \"", name, "\"; valid names are: ", valid);
}

ModulePtr small_cnn(int num_classes, uint64_t seed, bool init, bool batchnorm) {
  auto s = std::make_shared<Sequential>();
  conv_bn_relu(*s, 3, 16, batchnorm);
  s->add(std::make_shared<MaxPool2d>(2));
  conv_bn_relu(*s, 16, 32, batchnorm);
  s->add(std::make_shared<MaxPool2d>(2));
  conv_bn_relu(*s, 32, 64, batchnorm);
  s->add(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  s->add(std::make_shared<Flatten>());
  s->add(std::make_shared<Linear>(64, num_classes, true, nullptr));
  if (init) {
    Generator gen(seed);
    // ResNet's scheme (He init for ReLU convs) trains this plain stack faster than PyTorch's
    // a=sqrt(5) defaults.
    init::resnet_init(*s, gen);
  }
  return s;
}

}  // namespace tandem::models
