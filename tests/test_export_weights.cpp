// tests/test_export_weights.cpp: export_weights turns a training checkpoint into the state dict a
// PyTorch user loads strictly (issue 30): exactly torchvision's resnet18/resnet50 state_dict() keys
// and shapes (122 and 320), exactly Hugging Face's BertForMaskedLM keys for bert_tiny (the tied
// decoder's aliases included), no optimizer.* entry, and with --ema the average under the model's
// names. The key lists are tests/data/export/*.txt, written by make_key_lists.py from torchvision
// itself (and from bert_torch.py's HF names where transformers is absent). A real run: train_imagenet
// with --model-ema, then export with and without --ema.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/safetensors.h"
#include "checkpoint/checkpoint.h"
#include "layers/models/models.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem;
using tandem::testing::app;
using tandem::testing::AppRun;
using tandem::testing::run_app_on;

namespace {
const fs::path& root() {
  static const fs::path r = tandem::testing::scratch_dir("tandem_export");
  return r;
}
// "name [d0,d1,...]" lines, without the header comment.
std::vector<std::string> key_list(const std::string& file) {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  std::ifstream in(fs::path(src) / "tests/data/export" / file);
  REQUIRE(in.good());
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}
std::vector<std::string> key_list_of(const safetensors::File& f) {
  std::vector<std::string> out;
  for (const auto& [n, t] : f.tensors) {
    std::string shape;
    for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    out.push_back(n + " [" + shape + "]");
  }
  std::sort(out.begin(), out.end());
  return out;
}
// A checkpoint of `model` as a run would write it: the model, momentum-like optimizer entries, and
// an EMA (the parameters + 1) when `ema`.
std::string checkpoint_of(const std::string& model, int classes, bool ema) {
  models::ModelOptions mo;
  mo.init = false;
  ModulePtr m = models::create_model(model, classes, 0, mo);
  NamedTensors opt;
  for (const auto& [n, p] : m->named_parameters()) {
    opt.emplace_back("momentum." + n, Tensor::zeros(p.shape()));
    // The EMA is saved in PyTorch's layout (apps/trainer/step/ema.h): conv weights OIHW, tandem's OHWI.
    const Shape& sh = p.shape();
    if (ema) opt.emplace_back("ema." + n, Tensor::full(sh.size() == 4 ? Shape{sh[0], sh[3], sh[1], sh[2]} : sh, 1.0f));
  }
  TrainState st;
  st.model = model, st.step = 7;
  const std::string path = (root() / (model + (ema ? "_ema" : "") + ".safetensors")).string();
  save_checkpoint(path, *m, opt, st);
  return path;
}
safetensors::File exported(const std::string& ckpt, const std::string& flags, AppRun* run = nullptr) {
  const std::string out = ckpt + ".export" + std::to_string(flags.size()) + ".safetensors";
  const AppRun r = run_app_on(0, app("export_weights") + " --checkpoint " + ckpt + " --output " + out + " " + flags);
  INFO(r.output);
  if (run) *run = r;
  REQUIRE(r.status == 0);
  return safetensors::load(out);
}
}  // namespace

TEST_CASE("resnet18 and resnet50 exports hold exactly torchvision's state_dict() keys and shapes") {
  for (const char* model : {"resnet18", "resnet50"}) {
    const safetensors::File f = exported(checkpoint_of(model, 1000, false), "");
    std::vector<std::string> want = key_list(std::string("torchvision_") + model + ".txt");
    CHECK(want.size() == (std::string(model) == "resnet18" ? 122u : 320u));
    std::sort(want.begin(), want.end());
    const std::vector<std::string> got = key_list_of(f);
    CHECK(got == want);
    for (const auto& [n, t] : f.tensors) CHECK_MESSAGE(n.rfind("optimizer.", 0) != 0, n);
    CHECK(f.metadata.at("format") == "pt");
  }
}

TEST_CASE("a bert_tiny export holds exactly Hugging Face's BertForMaskedLM state_dict() keys") {
  const safetensors::File f = exported(checkpoint_of("bert_tiny", 30522, false), "");
  std::vector<std::string> want = key_list("hf_bert_tiny_mlm.txt");
  std::sort(want.begin(), want.end());
  CHECK(key_list_of(f) == want);
  // The aliases carry the tied tensors' values.
  const Tensor& words = f.at("bert.embeddings.word_embeddings.weight");
  const Tensor& decoder = f.at("cls.predictions.decoder.weight");
  CHECK(std::memcmp(words.data_ptr(), decoder.data_ptr(), words.nbytes()) == 0);
}

TEST_CASE("--ema exports the average under the model's names; a checkpoint without one is refused") {
  const std::string ckpt = checkpoint_of("resnet18", 1000, true);
  const safetensors::File plain = exported(ckpt, "");
  const safetensors::File ema = exported(ckpt, "--ema");
  CHECK(key_list_of(plain) == key_list_of(ema));
  CHECK(ema.at("fc.weight").data<float>()[0] == 1.0f);   // the EMA's value
  CHECK(plain.at("fc.weight").data<float>()[0] != 1.0f);  // the model's (uninitialised, not the EMA's)
  // Buffers stay the checkpoint's.
  CHECK(std::memcmp(ema.at("bn1.running_var").data_ptr(), plain.at("bn1.running_var").data_ptr(),
                    plain.at("bn1.running_var").nbytes()) == 0);
  const AppRun r = run_app_on(0, app("export_weights") + " --checkpoint " + checkpoint_of("resnet18", 1000, false) +
                                     " --output " + (root() / "no.safetensors").string() + " --ema");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.has("train with --model-ema"));
}

TEST_CASE("a real train_imagenet --model-ema checkpoint exports model-only, with and without --ema") {
  auto& data = tandem::testing::tiny_dataset("tandem_export_run");
  const std::string dir = (root() / "run").string();
  const AppRun t = run_app_on(0, app("train_imagenet") + " --device cpu --model resnet_tiny --image-size 16 "
                                                         "--workers 1 --batch-size 4 --steps 2 --model-ema 0.9 --data " +
                                     data.data + " --checkpoint-dir " + dir);
  INFO(t.output);
  REQUIRE(t.status == 0);
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") ckpt = e.path().string();
  REQUIRE(!ckpt.empty());
  const Checkpoint ck = read_checkpoint(ckpt);
  AppRun run;
  const safetensors::File f = exported(ckpt, "--ema", &run);
  CHECK(run.has("parameters are the EMA"));
  CHECK(f.tensors.size() == ck.model.size());
  for (const auto& [n, x] : f.tensors) CHECK_MESSAGE(n.rfind("optimizer.", 0) != 0, n);
}
