// tests/test_models.cpp: every model's parameter count against torchvision, names, and a forward.
//
// The torchvision counts (num_classes = 1000) can be re-derived by hand; e.g. vgg16:
//   convs (3x3, with bias): 3->64: 1,792; 64->64: 36,928; 64->128: 73,856; 128->128: 147,584;
//   128->256: 295,168; 256->256 (x2): 590,080 each; 256->512: 1,180,160; 512->512 (x5): 2,359,808
//   each -> 14,714,688. classifier: 25088*4096+4096 = 102,764,544; 4096*4096+4096 = 16,781,312;
//   4096*1000+1000 = 4,097,000 -> 123,642,856. Total 138,357,544. _bn adds 2 per conv channel:
//   2 * (2*64 + 2*128 + 3*256 + 6*512) = 8,448 -> 138,365,992.
// alexnet: convs 23,296 + 307,392 + 663,936 + 884,992 + 590,080 = 2,469,696; linears 37,752,832 +
// 16,781,312 + 4,097,000 = 58,631,144; total 61,100,840.
// resnet18: stem 9,408 + bn 128; layer1 2 x (2 x 36,864 + 256) = 147,968; layer2 525,568; layer3
// 2,099,712; layer4 8,393,728; fc 513,000 -> 11,689,512.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "layers/models/models.h"
#include "layers/models/resnet.h"

using namespace tandem;

TEST_CASE("parameter counts equal torchvision's for every model") {
  const std::vector<std::pair<std::string, int64_t>> expect{
      {"resnet18", 11689512},  {"resnet34", 21797672},  {"resnet50", 25557032},  {"resnet101", 44549160},
      {"resnet152", 60192808}, {"vgg11", 132863336},    {"vgg11_bn", 132868840}, {"vgg13", 133047848},
      {"vgg13_bn", 133053736}, {"vgg16", 138357544},    {"vgg16_bn", 138365992}, {"vgg19", 143667240},
      {"vgg19_bn", 143678248}, {"alexnet", 61100840}};
  models::ModelOptions no_init;
  no_init.init = false;  // counting only: skip drawing ~1.1 G random values
  for (const auto& [name, count] : expect) {
    CAPTURE(name);
    ModulePtr m = models::create_model(name, 1000, 0, no_init);
    CHECK(m->num_parameters() == count);
  }
}

TEST_CASE("torchvision's parameter and buffer names") {
  models::ModelOptions no_init;
  no_init.init = false;
  auto names_of = [](const ModulePtr& m) {
    std::vector<std::string> out;
    for (auto& [n, _] : m->named_parameters()) out.push_back(n);
    return out;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };

  ModulePtr r18 = models::create_model("resnet18", 1000, 0, no_init);
  auto n18 = names_of(r18);
  CHECK(n18.front() == "conv1.weight");
  CHECK(n18.back() == "fc.bias");
  CHECK(n18.size() == 62);  // torchvision: len(list(resnet18().parameters())) == 62
  CHECK(has(n18, "layer1.0.conv1.weight"));
  CHECK(has(n18, "layer2.0.downsample.0.weight"));
  CHECK(has(n18, "layer2.0.downsample.1.bias"));
  CHECK_FALSE(has(n18, "layer1.0.downsample.0.weight"));  // stride 1, same width: identity shortcut
  auto b18 = r18->named_buffers();
  CHECK(b18.front().first == "bn1.running_mean");
  CHECK(b18.back().first == "layer4.1.bn2.num_batches_tracked");

  ModulePtr r50 = models::create_model("resnet50", 1000, 0, no_init);
  auto n50 = names_of(r50);
  CHECK(n50.size() == 161);
  CHECK(has(n50, "layer1.0.downsample.0.weight"));  // 64 -> 256 channels
  CHECK(has(n50, "layer4.2.conv3.weight"));
  // v1.5: the stride sits on conv2 (3x3); conv1 (1x1) keeps stride 1.
  for (auto& [name, m] : r50->named_modules()) {
    if (name == "layer2.0.conv1") CHECK(m->extra_repr() == "256, 128, kernel_size=(1, 1), stride=(1, 1), bias=False");
    if (name == "layer2.0.conv2")
      CHECK(m->extra_repr() == "128, 128, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False");
  }

  auto nv = names_of(models::create_model("vgg16", 1000, 0, no_init));
  CHECK(nv.front() == "features.0.weight");
  CHECK(has(nv, "features.28.weight"));
  CHECK(has(nv, "classifier.3.weight"));
  CHECK(nv.back() == "classifier.6.bias");
  auto nvb = names_of(models::create_model("vgg16_bn", 1000, 0, no_init));
  CHECK(has(nvb, "features.1.running_mean") == false);  // buffers are not parameters
  CHECK(has(nvb, "features.40.weight"));
  CHECK(has(nvb, "features.41.weight"));  // BN after the last conv

  auto na = names_of(models::create_model("alexnet", 1000, 0, no_init));
  CHECK(na == std::vector<std::string>{"features.0.weight", "features.0.bias", "features.3.weight",
                                       "features.3.bias", "features.6.weight", "features.6.bias",
                                       "features.8.weight", "features.8.bias", "features.10.weight",
                                       "features.10.bias", "classifier.1.weight", "classifier.1.bias",
                                       "classifier.4.weight", "classifier.4.bias", "classifier.6.weight",
                                       "classifier.6.bias"});
}

TEST_CASE("unknown model names list the valid ones") {
  try {
    models::create_model("resnet19", 10, 0);
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("resnet18") != std::string::npos);
    CHECK(what.find("vgg19_bn") != std::string::npos);
    CHECK(what.find("resnet_tiny") != std::string::npos);
  }
}

TEST_CASE("resnet18 forward at 32x32, batch 2, gives [2, 1000] finite logits") {
  ModulePtr m = models::create_model("resnet18", 1000, 123);
  Generator gen(9);
  Tensor x = randn({2, 32, 32, 3}, gen);
  autograd::NoGradGuard ng;
  m->eval();
  Tensor y = (*m)(x);
  CHECK(y.shape() == Shape{2, 1000});
  for (float v : y.to_vector()) REQUIRE(std::isfinite(v));
}

TEST_CASE("a model's weights are a function of its seed alone") {
  auto flat = [](const ModulePtr& m) {
    std::vector<float> all;
    for (auto& [_, t] : m->named_parameters()) {
      auto v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  auto a = flat(models::create_model("resnet_tiny", 10, 123));
  CHECK(a == flat(models::create_model("resnet_tiny", 10, 123)));
  CHECK(a != flat(models::create_model("resnet_tiny", 10, 124)));
}

TEST_CASE("zero_init_residual zeroes the last BN of every block; small models run") {
  models::ModelOptions o;
  o.zero_init_residual = true;
  ModulePtr m = models::create_model("resnet_tiny", 10, 1, o);
  for (auto& [name, t] : m->named_parameters()) {
    bool last_bn = name.size() > 10 && name.compare(name.size() - 10, 10, "bn2.weight") == 0;
    if (last_bn) CHECK(t.to_vector() == std::vector<float>(t.numel(), 0.0f));
    if (name == "bn1.weight") CHECK(t.to_vector() == std::vector<float>(t.numel(), 1.0f));
  }
  Generator gen(2);
  CHECK((*m)(randn({2, 64, 64, 3}, gen)).shape() == Shape{2, 10});
  ModulePtr s = models::create_model("small_cnn", 4, 1);
  CHECK((*s)(randn({3, 16, 16, 3}, gen)).shape() == Shape{3, 4});
  CHECK(s->num_parameters() == 23696 + 65 * 4);
}

TEST_CASE("ResNet blocks: the BN+add+ReLU tail (forward_add_relu) equals the block composed by hand") {
  // The blocks end in BatchNorm2d::forward_add_relu (cuDNN's fused op on the GPU); on the CPU it is
  // the composition, so values and gradients must equal conv/bn/relu/add run one by one, bit for
  // bit, as before the change. BasicBlock with the identity shortcut, Bottleneck with a downsample.
  auto rand_params = [](Module& m, uint64_t seed) {
    Generator g(seed);
    for (auto& [_, p] : m.named_parameters()) p.detach().copy_(ops::scale(randn(p.shape(), g), 0.5f));
  };
  auto ds = std::make_shared<Sequential>();
  Conv2dOptions dso;
  dso.stride = 2;
  dso.bias = false;
  ds->add(std::make_shared<Conv2d>(4, 8, 1, dso, nullptr));
  ds->add(std::make_shared<BatchNorm2d>(8));
  struct Case {
    const char* name;
    ModulePtr block;
    int stages;
  };
  for (const Case& c : {Case{"basic", std::make_shared<models::BasicBlock>(4, 4, 1, nullptr), 2},
                        Case{"bottleneck", std::make_shared<models::Bottleneck>(4, 2, 2, ds), 3}}) {
    INFO(c.name);
    Module& b = *c.block;
    rand_params(b, 7);
    auto children = b.named_children();
    std::map<std::string, ModulePtr> kids(children.begin(), children.end());
    for (bool training : {true, false}) {
      INFO("training ", training);
      b.train(training);
      Generator g(3);
      Tensor x = randn({2, 6, 6, 4}, g).set_requires_grad(true);
      Tensor x2 = x.detach().clone().set_requires_grad(true);
      Tensor y = b(x);
      ops::sum(ops::mul(y, y)).backward();
      std::vector<std::vector<float>> grads;
      for (auto& [_, p] : b.named_parameters()) grads.push_back(p.grad().to_vector());
      b.zero_grad();

      Tensor h = x2;
      for (int i = 1; i < c.stages; ++i) {
        const std::string n = std::to_string(i);
        h = ops::relu((*kids.at("bn" + n))((*kids.at("conv" + n))(h)));
      }
      const std::string n = std::to_string(c.stages);
      Tensor tail = (*kids.at("bn" + n))((*kids.at("conv" + n))(h));
      Tensor ref = ops::relu(ops::add(tail, kids.count("downsample") ? (*kids.at("downsample"))(x2) : x2));
      ops::sum(ops::mul(ref, ref)).backward();
      CHECK(y.to_vector() == ref.to_vector());
      CHECK(x.grad().to_vector() == x2.grad().to_vector());
      size_t i = 0;
      for (auto& [name, p] : b.named_parameters()) {
        INFO(name);
        CHECK(p.grad().to_vector() == grads[i++]);
      }
      b.zero_grad();
    }
  }
}
