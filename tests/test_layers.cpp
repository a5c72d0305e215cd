// tests/test_layers.cpp: Module contracts (names, order, train/eval, in-place moves, zero_grad,
// describe) and the layers' shapes, inits and PyTorch-compatible details.
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/reduce/reduce.h"
#include "core/random.h"
#include "layers/init.h"
#include "layers/layers.h"

using namespace tandem;

namespace {
// A module with its own parameter registered AFTER its children: PyTorch still lists a module's own
// parameters before its children's, and so must tandem.
class Net : public Module {
 public:
  explicit Net(Generator* gen) {
    Conv2dOptions o;
    o.padding = 1;
    conv = register_module("conv", std::make_shared<Conv2d>(3, 4, 3, o, gen));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(4));
    head = register_module("head", std::make_shared<Sequential>(std::vector<ModulePtr>{
                                       std::make_shared<Flatten>(), std::make_shared<Linear>(4 * 4 * 4, 5, true, gen),
                                       std::make_shared<ReLU>(), std::make_shared<Linear>(5, 2, false, gen)}));
    scale = register_parameter("scale", Tensor::ones({2}));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*bn)((*conv)(x))); }
  std::string type_name() const override { return "Net"; }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Sequential> head;
  Tensor scale;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, _] : v) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("named_parameters/buffers/modules follow torch.nn.Module's order") {
  Generator gen(1);
  Net net(&gen);
  CHECK(names(net.named_parameters()) ==
        std::vector<std::string>{"scale", "conv.weight", "conv.bias", "bn.weight", "bn.bias", "head.1.weight",
                                 "head.1.bias", "head.3.weight"});
  CHECK(names(net.named_buffers()) ==
        std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  std::vector<std::string> mods;
  for (auto& [n, _] : net.named_modules()) mods.push_back(n);
  CHECK(mods == std::vector<std::string>{"", "conv", "bn", "head", "head.0", "head.1", "head.2", "head.3"});
  CHECK(net.num_parameters() == 2 + (4 * 3 * 3 * 3 + 4) + 8 + (64 * 5 + 5) + 10);
  // Handles: the tensor listed is the module's own (same TensorImpl).
  CHECK(net.named_parameters()[1].second.impl_ptr() == net.conv->weight().impl_ptr());
  CHECK(net.conv->weight().shape() == Shape{4, 3, 3, 3});  // OHWI
  CHECK(net.bn->num_batches_tracked().dtype() == DType::I64);
  CHECK(net.bn->num_batches_tracked().shape() == Shape{});
  for (auto& [_, p] : net.named_parameters()) CHECK(p.requires_grad());
}

TEST_CASE("train/eval reaches every descendant") {
  Net net(nullptr);
  CHECK(net.head->operator[](2)->is_training());
  net.eval();
  for (auto& [_, m] : net.named_modules()) CHECK_FALSE(m->is_training());
  net.train();
  for (auto& [_, m] : net.named_modules()) CHECK(m->is_training());
}

namespace {
// A BatchNorm2d that counts its forwards: shows which object a parent's handle runs.
struct CountingBN : BatchNorm2d {
  explicit CountingBN(int64_t c) : BatchNorm2d(c) {}
  Tensor forward(const Tensor& x) override {
    ++calls;
    return BatchNorm2d::forward(x);
  }
  int calls = 0;
};

// Holds its child only in the module's list, through a typed handle (as ResNet does).
struct Block : Module {
  Block() { bn = register_module("bn", std::make_shared<BatchNorm2d>(4)); }
  Tensor forward(const Tensor& x) override { return bn(x); }
  std::string type_name() const override { return "Block"; }
  Child<BatchNorm2d> bn;
};
}  // namespace

TEST_CASE("replace_child swaps the child in place: tree walks and typed handles see the new module") {
  Block b;
  auto counting = std::make_shared<CountingBN>(4);
  b.replace_child("bn", counting);
  CHECK(b.named_children().at(0).second == counting);
  CHECK(b.named_modules().at(1).second == counting.get());
  CHECK(&*b.bn == counting.get());
  b(Tensor::ones({2, 2, 2, 4}));
  CHECK(counting->calls == 1);
  // The handle expects a BatchNorm2d: anything else is refused, and the old child stays.
  CHECK_THROWS_WITH_AS(b.replace_child("bn", std::make_shared<ReLU>()),
                       doctest::Contains("cannot be replaced by a ReLU"), Error);
  CHECK(&*b.bn == counting.get());
  CHECK_THROWS_AS(b.replace_child("conv", counting), Error);
  // A Sequential's entries are plain Modules: any module may take their place.
  Sequential s(std::vector<ModulePtr>{std::make_shared<ReLU>()});
  s.replace_child("0", std::make_shared<GELU>());
  CHECK(s[0]->type_name() == "GELU");
  CHECK(s[0]->name() == "0");
}

TEST_CASE("to(dtype) casts in place: earlier handles see the new dtype and values") {
  Generator gen(7);
  Net net(&gen);
  Tensor w = net.conv->weight();            // a handle taken before the cast
  auto before = w.to_vector_f64();
  w.set_grad(Tensor::ones(w.shape()));
  net.to(DType::F64);
  CHECK(w.dtype() == DType::F64);
  CHECK(net.named_parameters()[1].second.dtype() == DType::F64);
  CHECK(w.to_vector_f64() == before);        // f32 -> f64 is exact
  CHECK(w.grad().dtype() == DType::F64);
  CHECK(net.bn->running_var().dtype() == DType::F64);
  CHECK(net.bn->num_batches_tracked().dtype() == DType::I64);  // integer buffers keep their dtype
  CHECK_THROWS_AS(net.to(DType::I32), Error);
  net.to(Device::cpu());  // same device: a no-op that must not break anything
  CHECK(w.dtype() == DType::F64);
}

TEST_CASE("zero_grad zeroes in place and keeps the gradient storage") {
  Generator gen(3);
  Net net(&gen);
  Tensor x = randn({2, 4, 4, 3}, gen);
  ops::sum(net(x)).backward();
  Tensor g = net.conv->weight().grad();
  REQUIRE(g.defined());
  void* ptr = g.data_ptr();
  bool any_nonzero = false;
  for (float v : g.to_vector()) any_nonzero |= v != 0.0f;
  CHECK(any_nonzero);
  net.zero_grad();
  CHECK(net.conv->weight().grad().data_ptr() == ptr);
  for (float v : net.conv->weight().grad().to_vector()) CHECK(v == 0.0f);
  CHECK_FALSE(net.scale.grad().defined());  // unused parameter: no gradient was created
}

TEST_CASE("describe() prints PyTorch's repr tree and the parameter count") {
  Net net(nullptr);
  std::string expect =
      "Net(\n"
      "  (conv): Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (head): Sequential(\n"
      "    (0): Flatten(start_dim=1, end_dim=-1)\n"
      "    (1): Linear(in_features=64, out_features=5, bias=True)\n"
      "    (2): ReLU()\n"
      "    (3): Linear(in_features=5, out_features=2, bias=False)\n"
      "  )\n"
      ")\n"
      "parameters: " + std::to_string(net.num_parameters());
  CHECK(net.describe() == expect);
  CHECK(MaxPool2d(3, 2, 1).extra_repr() == "kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False");
  CHECK(Dropout(0.5).extra_repr() == "p=0.5, inplace=False");
  CHECK(AdaptiveAvgPool2d(7, 7).extra_repr() == "output_size=(7, 7)");
  CHECK(LayerNorm(768).extra_repr() == "(768,), eps=1e-05, elementwise_affine=True");
  CHECK(Embedding(10, 4).extra_repr() == "10, 4");
}

TEST_CASE("default init: PyTorch's bounds, deterministic per seed") {
  Generator g1(42), g2(42), g3(43);
  Linear a(100, 50, true, &g1), b(100, 50, true, &g2), c(100, 50, true, &g3);
  auto wa = a.weight().to_vector();
  CHECK(wa == b.weight().to_vector());
  CHECK(wa != c.weight().to_vector());
  double bound = 1.0 / std::sqrt(100.0), maxabs = 0, sumsq = 0;
  for (float v : wa) {
    maxabs = std::max(maxabs, std::fabs(static_cast<double>(v)));
    sumsq += v * v;
  }
  CHECK(maxabs <= bound);
  CHECK(maxabs > 0.9 * bound);
  // U(-b, b) has variance b^2 / 3.
  CHECK(sumsq / wa.size() == doctest::Approx(bound * bound / 3).epsilon(0.1));
  Conv2d conv(8, 16, 3, {}, &g1);
  double cbound = 1.0 / std::sqrt(8.0 * 9.0);
  for (float v : conv.weight().to_vector()) CHECK(std::fabs(v) <= cbound);
  // kaiming_normal fan_out (ResNet/VGG convs): std = sqrt(2 / (16 * 9)).
  Tensor w = conv.weight();
  init::kaiming_normal_(w, conv.fan_out(), init::gain_relu(), g1);
  double ss = 0;
  for (float v : w.to_vector()) ss += v * v;
  CHECK(std::sqrt(ss / w.numel()) == doctest::Approx(std::sqrt(2.0 / 144.0)).epsilon(0.1));
}

TEST_CASE("Flatten of NHWC emits PyTorch's (C, H, W) order") {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Tensor x = Tensor::from_vector(v, {1, 2, 2, 3});  // x[0, h, w, c] = (h * 2 + w) * 3 + c
  auto out = Flatten()(x).to_vector();
  REQUIRE(out.size() == 12);
  for (int c = 0; c < 3; ++c)
    for (int hw = 0; hw < 4; ++hw) CHECK(out[c * 4 + hw] == static_cast<float>(hw * 3 + c));
  CHECK(Flatten()(Tensor::zeros({2, 1, 1, 5})).shape() == Shape{2, 5});
}

TEST_CASE("layer forwards: shapes, BN counter, dropout/eval, pooling") {
  Generator gen(5);
  Tensor x = randn({2, 8, 8, 3}, gen);
  Conv2dOptions o;
  o.stride = 2;
  o.padding = 1;
  CHECK(Conv2d(3, 6, 3, o, &gen)(x).shape() == Shape{2, 4, 4, 6});
  CHECK(MaxPool2d(3, 2, 1)(x).shape() == Shape{2, 4, 4, 3});
  CHECK(AvgPool2d(2)(x).shape() == Shape{2, 4, 4, 3});
  CHECK(AdaptiveAvgPool2d(1, 1)(x).shape() == Shape{2, 1, 1, 3});
  CHECK(AdaptiveAvgPool2d(3, 3)(x).shape() == Shape{2, 3, 3, 3});
  CHECK(GELU()(x).shape() == x.shape());

  BatchNorm2d bn(3);
  bn(x);
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 2);
  bn.eval();
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 2);
  CHECK(bn.running_mean().to_vector() != std::vector<float>(3, 0.0f));  // stats were updated

  Dropout d(0.5);
  d.eval();
  CHECK(d(x).to_vector() == x.to_vector());
  d.train();
  int zeros = 0;
  for (float v : d(x).to_vector()) zeros += v == 0.0f;
  CHECK(zeros > 0);

  LayerNorm ln(3);
  CHECK(ln(x).shape() == x.shape());
  Embedding emb(10, 4, &gen);
  CHECK(emb(Tensor::from_vector_i64({1, 2, 9}, {3})).shape() == Shape{3, 4});

  Linear lin(5, 2);
  CHECK_THROWS_AS(lin(Tensor::zeros({2, 4})), Error);
  CHECK_THROWS_AS(Conv2d(3, 4, 3)(Tensor::zeros({1, 3, 8, 8})), Error);  // NCHW by mistake
}

TEST_CASE("Sequential runs BatchNorm2d + ReLU as BatchNorm2d::forward_relu: the same values; hooks fire in order") {
  Generator gen(11);
  auto bn = std::make_shared<BatchNorm2d>(3);
  auto relu = std::make_shared<ReLU>();
  Sequential s(std::vector<ModulePtr>{bn, relu});
  BatchNorm2d ref(3);
  std::vector<std::string> order;
  std::vector<float> relu_out;
  auto h1 = bn->register_forward_pre_hook([&](Module&) { order.push_back("bn pre"); });
  auto h2 = bn->register_forward_hook([&](Module&, const Tensor&) { order.push_back("bn post"); });
  auto h3 = relu->register_forward_pre_hook([&](Module&) { order.push_back("relu pre"); });
  auto h4 = relu->register_forward_hook([&](Module&, const Tensor& y) {
    order.push_back("relu post");
    relu_out = y.to_vector();
  });
  Tensor x = ops::scale(randn({2, 3, 3, 3}, gen), 2.0f);
  Tensor y = s(x);
  CHECK(order == std::vector<std::string>{"bn pre", "bn post", "relu pre", "relu post"});
  const std::vector<float> expect = ops::relu(ref(x)).to_vector();
  CHECK(y.to_vector() == expect);
  CHECK(relu_out == expect);
  CHECK(bn->num_batches_tracked().to_vector_i64() == std::vector<int64_t>{1});
}
