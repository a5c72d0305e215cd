// tests/test_train_encoder_weights.cpp: train_encoder's --weights with Hugging Face's names,
// --model-ema, --sync-bn's refusal, and the memory ledger after a resume (issue 21).
//
// The Hugging Face file is made here: a trained checkpoint's model tensors (tandem's BERT carries
// HF's BertForMaskedLM names) plus the entries HF's state_dict() adds - the tied decoder weight and
// bias and the position_ids buffer - with no metadata, as safetensors.torch.save_file writes it.
// Started from it with an LR of 1e-12, the first validation scores what the source run's last one
// scored: the weights arrived. Synthetic tokens keep it quick (bert_tiny, 16-token sequences).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "checkpoint/checkpoint.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

fs::path root() { return tandem::testing::scratch_dir("tandem_encoder_weights"); }  // one per test process

AppRun run(int ranks, const std::string& args, const std::string& log) {
  AppRun r = tandem::testing::run_app(
      "HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(ranks) + app("train_encoder") +
      " --device cpu --synthetic --model bert_tiny --vocab-size 1000 --synthetic-tokens 20000 --seq-len 16 --batch 4 "
      "--log-every 10 " + args);
  std::ofstream(root() / log) << r.output;
  return r;
}

// The text after `prefix` up to the next space ("loss " -> "6.9081").
std::string after(const std::string& out, const std::string& prefix) {
  const size_t at = out.rfind(prefix);
  if (at == std::string::npos) return "(no '" + prefix + "')";
  return out.substr(at + prefix.size(), out.find(' ', at + prefix.size()) - at - prefix.size());
}

}  // namespace

TEST_CASE("train_encoder --weights takes a Hugging Face BertForMaskedLM state dict (aliases included)") {
  const std::string src = (root() / "src").string();
  const AppRun a = run(2, "--steps 20 --checkpoint-dir " + src, "src.log");
  INFO(a.output);
  REQUIRE(a.status == 0);
  tandem::Checkpoint c = tandem::read_checkpoint(src + "/checkpoint_step20.safetensors");
  tandem::NamedTensors hf = c.model;
  std::map<std::string, tandem::Tensor> by(c.model.begin(), c.model.end());
  REQUIRE(by.count("bert.embeddings.word_embeddings.weight") == 1);
  REQUIRE(by.count("cls.predictions.bias") == 1);
  hf.emplace_back("cls.predictions.decoder.weight", by["bert.embeddings.word_embeddings.weight"]);
  hf.emplace_back("cls.predictions.decoder.bias", by["cls.predictions.bias"]);
  std::vector<int64_t> ids(512);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  hf.emplace_back("bert.embeddings.position_ids", tandem::Tensor::from_vector_i64(ids, {1, 512}));
  const std::string file = (root() / "bert_hf.safetensors").string();
  tandem::safetensors::save(file, hf);

  const AppRun b = run(2, "--steps 1 --lr 1e-12 --warmup-steps 0 --weights " + file, "from_hf.log");
  INFO(b.output);
  REQUIRE(b.status == 0);
  CHECK(b.has("weights: " + file + " (a state dict): " + std::to_string(c.model.size()) + " tensors loaded"));
  CHECK(after(b.output, "validation step 1: masked-token accuracy ") ==
        after(a.output, "validation step 20: masked-token accuracy "));
  CHECK(after(b.output, "| loss ") == after(a.output, "| loss "));  // the validation line's loss

  // A head left at its init for fine-tuning: named in the line.
  const AppRun s = run(1, "--steps 1 --weights " + file + " --weights-skip 'cls.predictions.transform.*'", "skip.log");
  INFO(s.output);
  CHECK(s.status == 0);
  CHECK(s.has("kept at their initialisation (--weights-skip): cls.predictions.transform."));
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --weights " + file + " --resume " + file,
                                 "pass one of them");
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --sync-bn", "BERT has none");
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --zero 3 --model-ema", "--zero 3");
}

TEST_CASE("train_encoder --model-ema resumes exactly, and a resumed run measures the straight run's model state") {
  const std::string a = (root() / "ema_a").string(), b = (root() / "ema_b").string();
  const std::string flags = "--steps 20 --model-ema 0.9 --val-every 10 ";
  const AppRun whole = run(2, flags + "--checkpoint-dir " + a + " --metrics " + a + "/m.json", "ema_a.log");
  INFO(whole.output);
  REQUIRE(whole.status == 0);
  CHECK(whole.has("(ema) validation step 20: masked-token accuracy "));
  REQUIRE(run(2, flags + "--run-steps 10 --checkpoint-dir " + b, "ema_b1.log").status == 0);
  const AppRun resumed = run(2, flags + "--resume auto --checkpoint-dir " + b + " --metrics " + b + "/m.json", "ema_b2.log");
  tandem::testing::check_resumed_run(resumed, a, b, "checkpoint_step20.safetensors");
}
