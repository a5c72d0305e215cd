// tests/test_state_dict.cpp: Module <-> named tensors - PyTorch's names and order, buffers (i64
// included), conv layout by module type, and the checks made before a load changes anything.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>

#include "core/random.h"
#include "checkpoint/checkpoint.h"
#include "layers/models/models.h"
#include "checkpoint/state_dict.h"
#include "tests/support/error_text.h"

using namespace tandem;

namespace {
struct Leaf : Module {
  std::string type;
  Leaf(std::string t, std::vector<std::pair<std::string, Tensor>> params,
       std::vector<std::pair<std::string, Tensor>> buffers = {})
      : type(std::move(t)) {
    for (auto& [n, p] : params) register_parameter(n, p);
    for (auto& [n, b] : buffers) register_buffer(n, b);
  }
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return type; }
};

// conv (Conv2d, OHWI weight) -> bn (weight, bias; running_mean, running_var, num_batches_tracked)
// plus a non-conv module owning a 4-D "weight" that must NOT be permuted, and an own parameter on
// the root registered before the children.
struct Net : Module {
  Net(uint64_t seed) {
    Generator g(seed);
    register_parameter("scale", randn({2}, g));
    register_module("conv", std::make_shared<Leaf>("Conv2d", std::vector<std::pair<std::string, Tensor>>{
                                                                {"weight", randn({3, 2, 2, 4}, g)}}));
    register_module("bn", std::make_shared<Leaf>(
                              "BatchNorm2d",
                              std::vector<std::pair<std::string, Tensor>>{{"weight", randn({3}, g)},
                                                                          {"bias", randn({3}, g)}},
                              std::vector<std::pair<std::string, Tensor>>{
                                  {"running_mean", randn({3}, g)},
                                  {"running_var", rand({3}, g)},
                                  {"num_batches_tracked", Tensor::from_vector_i64({int64_t(seed)}, {})}}));
    register_module("other", std::make_shared<Leaf>("Bilinear", std::vector<std::pair<std::string, Tensor>>{
                                                                    {"weight", randn({2, 3, 4, 5}, g)}}));
  }
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Net"; }
};

std::vector<std::string> names(const NamedTensors& sd) {
  std::vector<std::string> out;
  for (const auto& [n, t] : sd) out.push_back(n);
  return out;
}
bool same(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor &x = a[i].second, &y = b[i].second;
    if (a[i].first != b[i].first || x.shape() != y.shape() || x.dtype() != y.dtype() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}
std::string error_of(Module& m, const NamedTensors& sd, LoadOptions opt = {}) {
  return tandem::testing::error_of([&] { load_state_dict(m, sd, opt); });
}
}  // namespace

TEST_CASE("state_dict lists PyTorch's names in PyTorch's order, buffers included, conv weights OIHW") {
  Net net(1);
  NamedTensors sd = state_dict(net);
  CHECK(names(sd) == std::vector<std::string>{"scale", "conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                              "bn.running_var", "bn.num_batches_tracked", "other.weight"});
  CHECK(sd[1].second.shape() == Shape{3, 4, 2, 2});     // OHWI [3,2,2,4] -> OIHW
  CHECK(sd[6].second.dtype() == DType::I64);
  CHECK(sd[7].second.shape() == Shape{2, 3, 4, 5});     // not a conv: untouched
  CHECK(sd[7].second.shares_storage(net.named_parameters()[4].second));
  // The permutation is a true transpose: OIHW[o][i][h][w] == OHWI[o][h][w][i].
  std::vector<float> ohwi = net.named_parameters()[1].second.to_vector(), oihw = sd[1].second.to_vector();
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 2; ++w) CHECK(oihw[((o * 4 + i) * 2 + h) * 2 + w] == ohwi[((o * 2 + h) * 2 + w) * 4 + i]);
  // Round trip of the helpers themselves, on every dtype width.
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    Tensor x = randn({2, 3, 4, 5}, default_generator(), DType::F64).to(t);
    CHECK(std::memcmp(oihw_to_ohwi(ohwi_to_oihw(x)).data_ptr(), x.data_ptr(), x.nbytes()) == 0);
  }
}

TEST_CASE("load_state_dict copies into the live tensors, bit for bit, through a file") {
  Net a(1), b(2);
  Tensor handle = b.named_parameters()[1].second;  // a handle taken before the load (an optimizer's)
  auto path = (std::filesystem::temp_directory_path() / ("tandem_sd_" + std::to_string(::getpid()))).string();
  save_model(path, a);
  LoadResult r = load_model(path, b);
  std::filesystem::remove(path);
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK(same(state_dict(a), state_dict(b)));
  CHECK(handle.to_vector() == a.named_parameters()[1].second.to_vector());
  CHECK(b.named_buffers()[2].second.to_vector_i64() == std::vector<int64_t>{1});
}

TEST_CASE("a bad state dict is refused with every problem listed, and nothing is changed") {
  Net a(1), b(2);
  const NamedTensors before = state_dict(b);
  auto before_copy = [&] {
    NamedTensors c;
    for (const auto& [n, t] : before) c.emplace_back(n, t.clone());
    return c;
  }();
  NamedTensors sd = state_dict(a);

  SUBCASE("missing and unexpected names") {
    NamedTensors bad(sd.begin() + 1, sd.end());  // drops "scale"
    bad.emplace_back("fc.weight", Tensor::zeros({1}));
    std::string e = error_of(b, bad);
    CHECK(e.find("missing from the state dict: scale") != std::string::npos);
    CHECK(e.find("not in the model: fc.weight") != std::string::npos);
    // Non-strict: loads what matches and reports the rest.
    LoadOptions loose;
    loose.strict = false;
    LoadResult r = load_state_dict(b, bad, loose);
    CHECK(r.missing == std::vector<std::string>{"scale"});
    CHECK(r.unexpected == std::vector<std::string>{"fc.weight"});
    CHECK(b.named_parameters()[1].second.to_vector() == a.named_parameters()[1].second.to_vector());
    return;
  }
  SUBCASE("a conv weight in tandem's layout instead of OIHW") {
    sd[1].second = a.named_parameters()[1].second;  // OHWI [3,2,2,4]
    std::string e = error_of(b, sd);
    CHECK(e.find("conv.weight: shape [3, 2, 2, 4] but the model expects [3, 4, 2, 2] (OIHW)") != std::string::npos);
  }
  SUBCASE("a dtype mismatch, allowed only with cast for floats") {
    sd[0].second = sd[0].second.to(DType::BF16);
    sd[6].second = Tensor::from_vector_i64({5}, {}, DType::I32);
    std::string e = error_of(b, sd);
    CHECK(e.find("scale: dtype bf16 but the model holds f32") != std::string::npos);
    CHECK(e.find("bn.num_batches_tracked: dtype i32 but the model holds i64") != std::string::npos);
    LoadOptions c;
    c.cast = true;
    CHECK(error_of(b, sd, c).find("num_batches_tracked") != std::string::npos);  // ints never cast
  }
  CHECK(same(state_dict(b), before_copy));
}

TEST_CASE("cast loads an f32 state dict into a bf16 model") {
  Net a(1), b(2);
  b.to(DType::BF16);
  LoadOptions c;
  c.cast = true;
  load_state_dict(b, state_dict(a), c);
  CHECK(b.named_parameters()[0].second.dtype() == DType::BF16);
  CHECK(b.named_parameters()[0].second.to_vector() == a.named_parameters()[0].second.to(DType::BF16).to_vector());
}

TEST_CASE("resnet18's state dict has torchvision's names, shapes (OIHW) and dtypes") {
  models::ModelOptions mo;
  mo.init = false;  // shapes and names only: skip drawing 11 M values
  ModulePtr m = models::create_model("resnet18", 1000, 0, mo);
  NamedTensors sd = state_dict(*m);
  // len(torchvision.models.resnet18().state_dict()) == 122: 62 parameters + 20 BNs x 3 buffers.
  CHECK(sd.size() == 122);
  auto find = [&](const std::string& n) -> Tensor {
    for (auto& [k, t] : sd)
      if (k == n) return t;
    FAIL("missing ", n);
    return {};
  };
  CHECK(sd.front().first == "conv1.weight");
  CHECK(find("conv1.weight").shape() == Shape{64, 3, 7, 7});
  CHECK(find("layer2.0.downsample.0.weight").shape() == Shape{128, 64, 1, 1});
  CHECK(find("layer4.1.conv2.weight").shape() == Shape{512, 512, 3, 3});
  CHECK(find("bn1.num_batches_tracked").dtype() == DType::I64);
  CHECK(find("fc.weight").shape() == Shape{1000, 512});
  CHECK(sd.back().first == "fc.bias");
  CHECK(conv_weight_names(*m).size() == 20);
}
