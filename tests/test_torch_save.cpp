// tests/test_torch_save.cpp: .pth/.pt files written by a real torch.save (tests/data/pth/, made by
// make_pth_fixtures.py with PyTorch 1.13) are read natively and safely (core/torch_save.h): views,
// offsets and dtypes come out right, a model.state_dict() loads strictly into tandem's small_cnn and
// gives PyTorch's logits (forward_check), the {"model": ...}/{"state_dict": ...} wrappers are
// unwrapped, train_imagenet fine-tunes from it, and a pickle that would run code (os.system), a
// torchvision-style checkpoint with an argparse.Namespace, or a re-zipped (deflated) file is refused
// by name - and nothing is executed. The mutated variants are in test_fuzz_parsers.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/safetensors.h"
#include "core/torch_save.h"
#include "layers/models/models.h"
#include "checkpoint/weights.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem;
using tandem::testing::app;
using tandem::testing::AppRun;
using tandem::testing::run_app_on;

namespace {
std::string fixture(const std::string& name) {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  return (fs::path(src) / "tests/data/pth" / name).string();
}
const Tensor& named(const safetensors::NamedTensors& sd, const std::string& name) {
  for (const auto& [n, t] : sd)
    if (n == name) return t;
  FAIL("no tensor ", name);
  static Tensor none;
  return none;
}
std::string refusal(const std::string& file) {
  try {
    torch_save::load(fixture(file));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("a torch.save file: views come out contiguous, storage offsets and every dtype read as PyTorch wrote them") {
  const auto sd = torch_save::load(fixture("strided.pth"));
  REQUIRE(sd.size() == 5);
  CHECK(sd[0].first == "t");  // the pickle's order
  const Tensor& t = named(sd, "t");  // arange(6).reshape(2, 3).t(): stride (1, 3)
  REQUIRE(t.shape() == Shape{3, 2});
  const float want_t[] = {0, 3, 1, 4, 2, 5};
  for (int k = 0; k < 6; ++k) CHECK(t.data<float>()[k] == want_t[k]);
  const Tensor& h = named(sd, "h");
  REQUIRE(h.dtype() == DType::F16);
  for (int k = 0; k < 4; ++k) CHECK(static_cast<float>(h.data<Half>()[k]) == k);
  const Tensor& d = named(sd, "d");
  REQUIRE(d.dtype() == DType::F64);
  for (int k = 0; k < 3; ++k) CHECK(d.data<double>()[k] == 0.5 * k);
  const Tensor& i = named(sd, "i");
  REQUIRE(i.dtype() == DType::I32);
  for (int k = 0; k < 5; ++k) CHECK(i.data<int32_t>()[k] == k - 2);
  const Tensor& s = named(sd, "s");  // base[4:7]: storage offset 4 into a storage of 10
  REQUIRE(s.shape() == Shape{3});
  for (int k = 0; k < 3; ++k) CHECK(s.data<float>()[k] == 4 + k);
}

TEST_CASE("a model.state_dict() .pth loads strictly into small_cnn; the wrappers give the same tensors") {
  std::string wrapper = "unset";
  const auto sd = torch_save::load(fixture("small_cnn.pth"), &wrapper);
  CHECK(wrapper.empty());
  REQUIRE(sd.size() == 20);  // 3 convs, 3 BNs x 5, the Linear's 2
  const Tensor& tracked = named(sd, "1.num_batches_tracked");
  REQUIRE(tracked.dtype() == DType::I64);
  CHECK(tracked.dim() == 0);
  CHECK(tracked.data<int64_t>()[0] == 3);  // three training-mode forwards in the script
  for (const char* file : {"wrapped_model.pth", "wrapped_state_dict.pth"}) {
    std::string w;
    const auto other = torch_save::load(fixture(file), &w);
    CHECK(w == (std::string(file) == "wrapped_model.pth" ? "model" : "state_dict"));
    REQUIRE(other.size() == sd.size());
    for (size_t k = 0; k < sd.size(); ++k) {
      CHECK(other[k].first == sd[k].first);
      CHECK(std::memcmp(other[k].second.data_ptr(), sd[k].second.data_ptr(), sd[k].second.nbytes()) == 0);
    }
  }
  models::ModelOptions mo;
  mo.init = false;
  ModulePtr model = models::create_model("small_cnn", 3, 0, mo);
  const WeightsResult r = load_weights(fixture("small_cnn.pth"), *model);
  CHECK(r.loaded.size() == 20);
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
}

TEST_CASE("forward_check on a .pth gives PyTorch's logits") {
  const std::string out = (fs::temp_directory_path() / ("tandem_pth_logits_" + std::to_string(::getpid()) +
                                                        ".safetensors")).string();
  const AppRun r = run_app_on(0, app("forward_check") + " --model small_cnn --num-classes 3 --weights " +
                                     fixture("small_cnn.pth") + " --input " + fixture("small_cnn_input.safetensors") +
                                     " --output " + out);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const Tensor got = safetensors::load(out).at("logits");
  const Tensor want = safetensors::load(fixture("small_cnn_logits.safetensors")).at("logits");
  REQUIRE(got.shape() == want.shape());
  double worst = 0;
  for (int64_t k = 0; k < want.numel(); ++k)
    worst = std::max(worst, static_cast<double>(std::abs(got.data<float>()[k] - want.data<float>()[k])));
  MESSAGE("largest |tandem - PyTorch| logit difference: ", worst);
  CHECK(worst < 1e-4);  // f32, a different summation order in the convolutions
  fs::remove(out);
}

TEST_CASE("train_imagenet fine-tunes from a .pth, and --evaluate takes one") {
  auto& data = tandem::testing::tiny_dataset("tandem_pth");
  const std::string common = app("train_imagenet") + " --device cpu --model small_cnn --image-size 16 --workers 1 "
                                                     "--batch-size 4 --data " + data.data + " --weights " +
                             fixture("wrapped_model.pth");
  const AppRun r = run_app_on(0, common + " --steps 2 --lr 0.01");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.has("a torch.save file: the state dict under \"model\""));
  const AppRun e = run_app_on(0, common + " --evaluate");
  INFO(e.output);
  CHECK(e.status == 0);
  CHECK(e.has("evaluate: " + fixture("wrapped_model.pth") + " (weights): val top1"));
}

TEST_CASE("what is not a state dict is refused by name, and nothing in the pickle runs") {
  fs::remove("/tmp/tandem_pth_was_executed");
  const std::string evil = refusal("evil.pth");
  CHECK(evil.find("posix.system") != std::string::npos);
  CHECK(evil.find("not part of a state dict") != std::string::npos);
  CHECK(!fs::exists("/tmp/tandem_pth_was_executed"));
  CHECK(refusal("namespace.pth").find("argparse.Namespace") != std::string::npos);
  const std::string deflated = refusal("compressed.pth");
  CHECK(deflated.find("is compressed (zip method 8)") != std::string::npos);
  // Through the trainer: the refusal, not a "corrupt header".
  const AppRun r = run_app_on(0, app("train_imagenet") + " --synthetic --model small_cnn --num-classes 3 --steps 1 "
                                                         "--weights " + fixture("evil.pth"));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.has("posix.system"));
  CHECK(!fs::exists("/tmp/tandem_pth_was_executed"));
}
