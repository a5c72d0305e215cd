// tests/test_weights.cpp: load_weights (checkpoint/weights.h) on files made here, as PyTorch makes them.
//
// A "torchvision file" is the model's state dict under torchvision's names and layouts written with
// core/safetensors and no tandem metadata - what safetensors.torch.save_file(model.state_dict())
// writes - with every value perturbed, so a model built from the same seed matches it only if the
// load really happened. Checked: bit-exact round trip into resnet18 (and the OIHW -> OHWI layout
// element by element), strict refusals naming the tensor, a 1000-class file into a 10-class model
// with skip "fc.*", a tandem checkpoint, a wrong shape, casts, remaps and absent BN counters.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "layers/models/models.h"
#include "checkpoint/weights.h"

using namespace tandem;

namespace {

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("tandem_weights_" + tag + "_" + std::to_string(::getpid()) + ".safetensors"))
      .string();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Same names in the same order, bit for bit.
bool same_bits(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !same_bits(a[i].second, b[i].second)) return false;
  return true;
}

// Every value moved (floats to x * 1.5 + 0.25, counters to 7), so that a model built from the same
// seed as the file's source equals the file only after a load.
NamedTensors perturbed(const NamedTensors& sd) {
  NamedTensors out;
  for (const auto& [n, t] : sd) {
    if (t.dtype() == DType::F32) {
      std::vector<float> v = t.to_vector();
      for (float& x : v) x = x * 1.5f + 0.25f;
      out.emplace_back(n, Tensor::from_vector(v, t.shape()));
    } else {
      out.emplace_back(n, Tensor::full(t.shape(), 7, t.dtype()));
    }
  }
  return out;
}

NamedTensors without(const NamedTensors& sd, const std::string& name) {
  NamedTensors out;
  for (const auto& [n, t] : sd)
    if (n != name) out.emplace_back(n, t);
  return out;
}

const Tensor& find(const NamedTensors& sd, const std::string& name) {
  for (const auto& [n, t] : sd)
    if (n == name) return t;
  FAIL("no tensor named " << name);
  throw 0;
}

std::string error_of(const std::string& path, Module& m, const WeightsOptions& o = {}) {
  try {
    load_weights(path, m, o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("glob patterns: whole names, '*' crosses dots") {
  CHECK(glob_match("fc.*", "fc.weight"));
  CHECK(glob_match("fc.*", "fc.bias"));
  CHECK_FALSE(glob_match("fc.*", "fc"));
  CHECK_FALSE(glob_match("fc.*", "layer1.fc.weight"));  // whole-name match, not a search
  CHECK_FALSE(glob_match("fc.*", "fcx"));               // '.' is a literal dot, unlike a regex
  CHECK(glob_match("*.num_batches_tracked", "layer1.0.bn1.num_batches_tracked"));
  CHECK(glob_match("classifier.[6]*", "classifier.6.weight"));
  CHECK_FALSE(glob_match("classifier.[6]*", "classifier.0.weight"));
}

TEST_CASE("a torchvision-named state dict loads into resnet18 bit for bit, conv weights OIHW -> OHWI") {
  ModulePtr a = models::create_model("resnet18", 10, 1);
  const NamedTensors file = perturbed(state_dict(*a));
  const std::string path = temp_path("tv");
  safetensors::save(path, file);  // no metadata, as safetensors.torch.save_file writes it
  ModulePtr b = models::create_model("resnet18", 10, 1);  // same seed: equal to `a` before the load
  REQUIRE_FALSE(same_bits(state_dict(*b), file));
  WeightsResult r = load_weights(path, *b);
  CHECK(r.format == WeightsFormat::StateDict);
  CHECK(r.checkpoint_step == -1);
  CHECK(r.loaded.size() == file.size());
  CHECK(r.skipped.empty());
  CHECK(r.notes.empty());
  CHECK(same_bits(state_dict(*b), file));
  // torchvision's names and shapes, and the layout: file [o, i, kh, kw] is model [o, kh, kw, i].
  CHECK(find(file, "fc.weight").shape() == Shape{10, 512});
  CHECK(find(file, "layer4.1.bn2.num_batches_tracked").dtype() == DType::I64);
  const Tensor& f = find(file, "conv1.weight");
  REQUIRE(f.shape() == Shape{64, 3, 7, 7});
  Tensor w;
  for (const auto& [n, t] : b->named_parameters())
    if (n == "conv1.weight") w = t;
  REQUIRE(w.shape() == Shape{64, 7, 7, 3});
  const std::vector<float> fv = f.to_vector(), wv = w.to_vector();
  for (int o : {0, 17, 63})
    for (int i = 0; i < 3; ++i)
      for (int h : {0, 3, 6})
        for (int x : {0, 5, 6}) CHECK(fv[((o * 3 + i) * 7 + h) * 7 + x] == wv[((o * 7 + h) * 7 + x) * 3 + i]);
  // Hugging Face's save_pretrained adds {"format": "pt"}: still a plain state dict.
  safetensors::save(path, file, {{"format", "pt"}});
  ModulePtr c = models::create_model("resnet18", 10, 2);
  CHECK(load_weights(path, *c).format == WeightsFormat::StateDict);
  CHECK(same_bits(state_dict(*c), file));
  std::filesystem::remove(path);
}

TEST_CASE("strict: a missing or an extra tensor is refused, named, and nothing changes; non-strict reports them") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 1);
  const NamedTensors file = perturbed(state_dict(*a));
  const std::string path = temp_path("strict");
  ModulePtr b = models::create_model("resnet_tiny", 10, 2);
  NamedTensors before;  // a snapshot: state_dict shares storage with the model
  for (const auto& [n, t] : state_dict(*b)) before.emplace_back(n, t.clone());

  safetensors::save(path, without(file, "layer1.0.bn1.running_mean"));
  std::string e = error_of(path, *b);
  CHECK(contains(e, "missing from the file: layer1.0.bn1.running_mean"));
  CHECK(contains(e, "WeightsOptions::skip"));
  CHECK(contains(e, "nothing was changed"));
  CHECK(same_bits(state_dict(*b), before));

  NamedTensors extra = file;
  extra.emplace_back("extra.weight", Tensor::zeros({3}));
  safetensors::save(path, extra);
  e = error_of(path, *b);
  CHECK(contains(e, "in the file but not in the model: extra.weight"));
  CHECK(same_bits(state_dict(*b), before));

  NamedTensors both = without(file, "layer1.0.bn1.running_mean");
  both.emplace_back("extra.weight", Tensor::zeros({3}));
  safetensors::save(path, both);
  WeightsOptions loose;
  loose.strict = false;
  WeightsResult r = load_weights(path, *b, loose);
  CHECK(r.missing == std::vector<std::string>{"layer1.0.bn1.running_mean"});
  CHECK(r.unexpected == std::vector<std::string>{"extra.weight"});
  CHECK(same_bits(find(state_dict(*b), "layer1.0.bn1.running_mean"), find(before, "layer1.0.bn1.running_mean")));
  CHECK(same_bits(find(state_dict(*b), "layer1.0.conv1.weight"), find(file, "layer1.0.conv1.weight")));
  std::filesystem::remove(path);
}

TEST_CASE("skip \"fc.*\" loads a 1000-class file into a 10-class model, the head keeping its initialisation") {
  ModulePtr src = models::create_model("resnet_tiny", 1000, 3);
  const NamedTensors file = perturbed(state_dict(*src));
  const std::string path = temp_path("skip");
  safetensors::save(path, file);
  ModulePtr dst = models::create_model("resnet_tiny", 10, 4);
  const Tensor head = find(state_dict(*dst), "fc.weight").clone();

  // Without skip: the head's shape is refused, both shapes named, with the hint.
  std::string e = error_of(path, *dst);
  CHECK(contains(e, "fc.weight: shape [1000, 128] in the file but [10, 128] in the model"));
  CHECK(contains(e, "fc.bias: shape [1000]"));
  CHECK(contains(e, "WeightsOptions::skip (\"fc.*\""));
  WeightsOptions loose;
  loose.strict = false;  // a shape is refused in every mode, as in PyTorch
  CHECK_THROWS(load_weights(path, *dst, loose));

  WeightsOptions o;
  o.skip = {"fc.*"};
  WeightsResult r = load_weights(path, *dst, o);
  CHECK(r.dropped == std::vector<std::string>{"fc.weight", "fc.bias"});  // the file's order
  CHECK(r.skipped == std::vector<std::string>{"fc.bias", "fc.weight"});
  CHECK(r.loaded.size() == file.size() - 2);
  const NamedTensors now = state_dict(*dst);
  CHECK(same_bits(find(now, "fc.weight"), head));
  for (const auto& [n, t] : file)
    if (n.rfind("fc.", 0) != 0) CHECK_MESSAGE(same_bits(find(now, n), t), n);

  // A pattern that hits nothing is a typo, not a no-op.
  o.skip = {"fc.*", "fcc.*"};
  e = error_of(path, *dst, o);
  CHECK(contains(e, "'fcc.*' matches no tensor"));
  std::filesystem::remove(path);
}

TEST_CASE("a tandem training checkpoint loads its model tensors; optimizer state and position are ignored") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 5);
  NamedTensors optimizer;
  for (const auto& [n, p] : a->named_parameters()) optimizer.emplace_back(n + ".momentum_buffer", p.clone());
  TrainState st;
  st.step = 42, st.epoch = 3, st.model = "resnet_tiny";
  const std::string path = temp_path("ckpt");
  save_checkpoint(path, *a, optimizer, st);
  ModulePtr b = models::create_model("resnet_tiny", 10, 6);
  REQUIRE_FALSE(same_bits(state_dict(*b), state_dict(*a)));
  WeightsResult r = load_weights(path, *b);  // strict: the optimizer.* entries are not "unexpected"
  CHECK(r.format == WeightsFormat::Checkpoint);
  CHECK(r.checkpoint_step == 42);
  CHECK(r.unexpected.empty());
  CHECK(same_bits(state_dict(*b), state_dict(*a)));
  REQUIRE(r.notes.size() == 1);
  CHECK(contains(r.notes[0], std::to_string(optimizer.size()) + " optimizer tensors"));
  std::filesystem::remove(path);
}

TEST_CASE("a tensor of the wrong shape is refused, naming it, and nothing changes") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 1);
  NamedTensors file = perturbed(state_dict(*a));
  for (auto& [n, t] : file)
    if (n == "layer2.0.conv2.weight") t = Tensor::zeros({t.size(0), t.size(1), 3, 1});
  const std::string path = temp_path("shape");
  safetensors::save(path, file);
  ModulePtr b = models::create_model("resnet_tiny", 10, 2);
  NamedTensors before;
  for (const auto& [n, t] : state_dict(*b)) before.emplace_back(n, t.clone());
  const std::string e = error_of(path, *b);
  CHECK(contains(e, "layer2.0.conv2.weight: shape [32, 32, 3, 1] in the file but [32, 32, 3, 3] in the model"));
  CHECK(same_bits(state_dict(*b), before));
  std::filesystem::remove(path);
}

TEST_CASE("dtypes: an f64 file is cast to the f32 model (exactly, with a note); integer buffers must match") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 1);
  const NamedTensors f32 = perturbed(state_dict(*a));
  NamedTensors f64;
  size_t floats = 0;
  for (const auto& [n, t] : f32) {
    f64.emplace_back(n, t.dtype() == DType::F32 ? t.to(DType::F64) : t);
    floats += t.dtype() == DType::F32;
  }
  const std::string path = temp_path("dtype");
  safetensors::save(path, f64);
  ModulePtr b = models::create_model("resnet_tiny", 10, 2);
  WeightsResult r = load_weights(path, *b);
  CHECK(same_bits(state_dict(*b), f32));  // f32 -> f64 -> f32 is exact
  REQUIRE(r.notes.size() == 1);
  CHECK(r.notes[0] == "cast " + std::to_string(floats) + " tensors from f64 to f32, the model's dtype");

  NamedTensors counters = f32;
  for (auto& [n, t] : counters)
    if (n == "bn1.num_batches_tracked") t = t.to(DType::I32);
  safetensors::save(path, counters);
  CHECK(contains(error_of(path, *b), "bn1.num_batches_tracked: dtype i32 in the file but i64 in the model"));
  std::filesystem::remove(path);
}

TEST_CASE("remap: a DDP-wrapped save loads through strip_prefix; a mapping hook renames a foreign head") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 1);
  const NamedTensors file = perturbed(state_dict(*a));
  NamedTensors wrapped;
  for (const auto& [n, t] : file) wrapped.emplace_back("module." + n, t);
  const std::string path = temp_path("remap");
  safetensors::save(path, wrapped);
  ModulePtr b = models::create_model("resnet_tiny", 10, 2);
  CHECK(contains(error_of(path, *b), "WeightsOptions::remap"));
  WeightsOptions o;
  o.remap = strip_prefix("module.");
  load_weights(path, *b, o);
  CHECK(same_bits(state_dict(*b), file));

  // A hook sees the file's names and hands back the model's (the encoder passes its HF mapping so).
  NamedTensors foreign;
  for (const auto& [n, t] : file) foreign.emplace_back(n.rfind("fc.", 0) == 0 ? "head." + n.substr(3) : n, t);
  safetensors::save(path, foreign);
  ModulePtr c = models::create_model("resnet_tiny", 10, 3);
  WeightsOptions h;
  h.remap = [](const NamedTensors& sd) {
    NamedTensors out;
    for (const auto& [n, t] : sd) out.emplace_back(n.rfind("head.", 0) == 0 ? "fc." + n.substr(5) : n, t);
    return out;
  };
  h.skip = {"layer4.*"};  // skips match the mapped names
  WeightsResult r = load_weights(path, *c, h);
  CHECK(same_bits(find(state_dict(*c), "fc.weight"), find(file, "fc.weight")));
  CHECK_FALSE(r.skipped.empty());
  for (const std::string& n : r.skipped) CHECK(n.rfind("layer4.", 0) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("BatchNorm counters absent (a file saved before PyTorch 0.4.1) load strictly, left as they were") {
  ModulePtr a = models::create_model("resnet_tiny", 10, 1);
  NamedTensors old;
  size_t counters = 0;
  for (const auto& [n, t] : perturbed(state_dict(*a))) {
    if (n.size() > 20 && n.compare(n.size() - 20, 20, ".num_batches_tracked") == 0) ++counters;
    else old.emplace_back(n, t);
  }
  REQUIRE(counters > 0);
  const std::string path = temp_path("counters");
  safetensors::save(path, old);
  ModulePtr b = models::create_model("resnet_tiny", 10, 2);
  WeightsResult r = load_weights(path, *b);
  CHECK(r.missing.empty());
  REQUIRE(r.notes.size() == 1);
  CHECK(contains(r.notes[0], std::to_string(counters) + " BatchNorm num_batches_tracked counters"));
  CHECK(find(state_dict(*b), "bn1.num_batches_tracked").to_vector_i64() == std::vector<int64_t>{0});
  CHECK(same_bits(find(state_dict(*b), "layer1.0.conv1.weight"), find(old, "layer1.0.conv1.weight")));
  std::filesystem::remove(path);
}

TEST_CASE("a Hugging Face BertForMaskedLM state dict: same names, its aliases through the remap hook") {
  // HF's state_dict() = tandem's names plus the tied decoder's aliases and (older transformers)
  // position_ids. apps/encoder passes its checking mapping as the hook; a minimal one stands in here.
  ModulePtr a = models::create_model("bert_tiny", 64, 1);
  NamedTensors hf = perturbed(state_dict(*a));
  hf.emplace_back("cls.predictions.decoder.weight", find(hf, "bert.embeddings.word_embeddings.weight"));
  hf.emplace_back("cls.predictions.decoder.bias", find(hf, "cls.predictions.bias"));
  const std::string path = temp_path("hf");
  safetensors::save(path, hf, {{"format", "pt"}});
  ModulePtr b = models::create_model("bert_tiny", 64, 2);
  const std::string e = error_of(path, *b);
  CHECK(contains(e, "in the file but not in the model: cls.predictions.decoder.weight, cls.predictions.decoder.bias"));
  CHECK(contains(e, "Hugging Face mapping"));
  WeightsOptions o;
  o.remap = [](const NamedTensors& sd) {
    NamedTensors out;
    for (const auto& [n, t] : sd)
      if (n.rfind("cls.predictions.decoder.", 0) != 0) out.emplace_back(n, t);
    return out;
  };
  WeightsResult r = load_weights(path, *b, o);
  CHECK(r.loaded.size() == hf.size() - 2);
  CHECK(same_bits(state_dict(*b), perturbed(state_dict(*a))));
  std::filesystem::remove(path);
}
