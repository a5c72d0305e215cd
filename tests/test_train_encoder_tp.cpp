// tests/test_train_encoder_tp.cpp: train_encoder --tp T end to end, each case as two runs side by side.
//
// With dropout off (--dropout 0: tensor parallelism draws its attention masks from another stream,
// dist/tp/bert.h) a TP run computes the same function as a data-parallel run over the same DP
// groups, up to the order of the sums in its all-reduces:
//   - TP 2 x DP 2 on 4 ranks reads the batches DDP reads on 2 ranks (each TP group reads one
//     batch: the loader's rank and world are the DP ones), so it prints the same loss per step and
//     ends in the same canonical checkpoint (1e-5 relative per tensor after 5 AdamW steps, clipping
//     on: the same gradient norm), under --zero 0, 1 and 2 alike. (Against DDP on 4 ranks at --batch B/2 the same
//     sequences are read, but each rank's masked-LM loss is a mean over its own masked tokens, so
//     the mean of 4 means is another number than the mean of 2: not a rounding question.)
//   - TP 4 on 4 ranks (DP 1) equals 1 rank with the same batch: bert_mini (4 heads) with a
//     vocabulary of 514, which TP 4 splits unevenly (129, 129, 128, 128 rows).
//   - A checkpoint written at TP 2 x DP 2 (ZeRO-2 over DP) is canonical: it resumes at --tp 1 --zero 1
//     on 4 ranks (the same global batch) and on 1 rank, and a DDP checkpoint resumes at --tp 2; each
//     ends where the uninterrupted DDP run ends (up to reduction order; the attention keys' biases,
//     whose gradients are ~0 and which AdamW's division magnifies, in shape only, as in
//     test_train_encoder_e2e.cpp). With dropout on, a --tp 2 run split and resumed at --tp 2 ends
//     byte for byte where the whole run ends (both dropout streams continue). A --zero 3 checkpoint
//     (parameters sharded over DP) resumes at --tp 2 --zero 1 and on 1 rank the same way.
//   - The ledger at --tp 2 halves the split layers, and measures so; --memory-budget-mib refuses a
//     DDP run that does not fit, naming --tp 4 and --zero 3, which then train.
//   - --amp bf16 with --tp 2: DDP's run up to bf16 rounding, and its f32 masters resume at --tp 1.
//   - --model-ema with --tp 2: DDP's average (its (ema) validation and the checkpoint's entries);
//     the checkpoint resumes at --tp 1, and a DDP one at --tp 2.
// And the refusals: a T that does not divide the world or the heads, --tp with --zero 3 or LAMB,
// --tp in train_imagenet.
// Binaries come from TANDEM_TEST_BINARY_DIR (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/tp/shard.h"
#include "layers/models/bert.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using tandem::testing::app;

namespace {

// The test's scratch folder, removed at exit.
struct Root {
  fs::path path = tandem::testing::scratch_dir("tandem_encoder_tp");
  ~Root() { fs::remove_all(path); }
};
const fs::path& root() {
  static const Root r;
  return r.path;
}

struct Run {
  int status = -1;
  std::vector<double> losses;  // the progress lines' loss, step by step (--log-every 1)
  std::string output;
};

// mpiexec -n ranks train_encoder on synthetic tokens, dropout off (unless args set it), a progress
// line per step.
Run train(int ranks, const std::string& args) {
  const tandem::testing::AppRun r = tandem::testing::run_app(
      "HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(ranks) + app("train_encoder") +
      " --device cpu --synthetic --synthetic-tokens 40000 --seq-len 32 --log-every 1 --val-batches 2 --warmup-steps 1 " +
      (args.find("--dropout ") == std::string::npos ? "--dropout 0 " : "") + args);
  Run out;
  out.status = r.status;
  out.output = r.output;
  static const std::regex line(R"(step (\d+)/\d+ \| loss ([0-9.]+))");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
    out.losses.push_back(std::stod((*it)[2]));
  if (r.status != 0) MESSAGE("train_encoder output:\n", r.output);
  return out;
}

// The same loss at every step, to the progress line's 4 decimals (one unit of the last digit: two
// sums in another order may round to either side of a digit).
void check_same_losses(const Run& a, const Run& b, size_t steps) {
  REQUIRE(a.losses.size() == steps);
  REQUIRE(b.losses.size() == steps);
  for (size_t i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= 1.01e-4);
  }
}

// The same validation line in both runs: `pattern` captures the accuracy (equal as printed) and the
// loss (within one unit of its 4th decimal, as check_same_losses).
void check_same_validation(const Run& a, const Run& b, const char* pattern) {
  const std::regex val(pattern);
  std::smatch ma, mb;
  REQUIRE(std::regex_search(a.output, ma, val));
  REQUIRE(std::regex_search(b.output, mb, val));
  CHECK(ma[1] == mb[1]);
  CHECK(std::abs(std::stod(ma[2]) - std::stod(mb[2])) <= 1.01e-4);
}

std::string dir(const std::string& name) {
  const fs::path d = root() / name;
  fs::remove_all(d);
  return d.string();
}

const std::vector<std::string> kTiny{"attention.self.key.bias"};  // see the file comment

// The resume tests' runs: bert_tiny for 6 steps, a global batch of 8, in a checkpoint folder.
const std::string kSixSteps = "--model bert_tiny --vocab-size 512 --steps 6 --checkpoint-dir ";

// The uninterrupted run they compare with, DDP on 2 ranks x 4: its folder (trained at the first call).
const std::string& uninterrupted() {
  static const std::string whole = [] {
    const std::string d = dir("whole");
    REQUIRE(train(2, kSixSteps + d + " --batch 4").status == 0);
    return d;
  }();
  return whole;
}

// The 6-step run stopped after step 3 in dir(name) on `ranks` ranks with `args` (a global batch of 8).
std::string stopped_at_step3(const std::string& name, int ranks, const std::string& args) {
  const std::string half = dir(name);
  REQUIRE(train(ranks, kSixSteps + half + args + " --run-steps 3").status == 0);
  REQUIRE(fs::exists(half + "/checkpoint_step3.safetensors"));
  return half;
}

// `half` resumed from a copy of it, dir(<name>_np<ranks>), at each of `at`'s ranks and flags (the
// same global batch of 8): it resumes and ends within 1e-4 of the uninterrupted run.
void resume_from_copies(const std::string& half, const std::string& name,
                        std::initializer_list<std::pair<int, std::string>> at) {
  const std::string end = "/checkpoint_step6.safetensors";
  for (const auto& [ranks, args] : at) {
    CAPTURE(ranks);
    const std::string d = dir(name + "_np" + std::to_string(ranks));
    fs::copy(half, d, fs::copy_options::recursive);
    const Run r = train(ranks, kSixSteps + d + " --resume auto " + args);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("resumed from") != std::string::npos);
    REQUIRE(fs::exists(d + end));
    MESSAGE("largest relative difference: ",
            tandem::testing::check_close_checkpoints(d + end, uninterrupted() + end, 1e-4, kTiny));
  }
}

}  // namespace

TEST_CASE("--tp 2 (TP 2 x DP 2, 4 ranks) equals DDP on 2 ranks: the loss per step and the checkpoint, --zero 0, 1 and 2") {
  const std::string common = "--model bert_tiny --vocab-size 512 --batch 4 --steps 5 --clip 0.5 --checkpoint-dir ";
  const std::string ddp = dir("ddp2");
  auto grad_norm = [](const std::string& metrics) {
    return nlohmann::json::parse(tandem::testing::slurp(metrics)).at("final").at("grad_norm").get<double>();
  };
  const Run ref = train(2, common + ddp + " --metrics " + ddp + ".json");
  REQUIRE(ref.status == 0);
  // The last step's norm before clipping: above --clip 0.5, so every step clipped, by the canonical
  // model's norm on every layout (the TP one sums the split squares over the TP group, once each).
  const double ref_norm = grad_norm(ddp + ".json");
  CHECK(ref_norm > 0.5);
  for (const std::string zero : {"0", "1", "2"}) {
    CAPTURE(zero);
    const std::string tp = dir("tp2_zero" + zero);
    const Run r = train(4, common + tp + " --tp 2 --zero " + zero + " --metrics " + tp + ".json");
    CHECK(grad_norm(tp + ".json") == doctest::Approx(ref_norm).epsilon(1e-5));
    REQUIRE(r.status == 0);
    CHECK(r.output.find("TP 2 x DP 2") != std::string::npos);
    check_same_losses(r, ref, 5);
    const double rel = tandem::testing::check_close_checkpoints(tp + "/checkpoint_step5.safetensors",
                                                                ddp + "/checkpoint_step5.safetensors", 1e-5, kTiny);
    MESSAGE("largest relative difference: ", rel);
  }
}

TEST_CASE("the memory ledger of --tp 2: the split layers' parameters, gradients and AdamW state halved, and measured so") {
  using namespace tandem;
  const std::string metrics = (root() / "tp2_ledger.json").string();
  const Run r = train(4, "--model bert_tiny --vocab-size 512 --batch 4 --steps 2 --tp 2 --metrics " + metrics);
  REQUIRE(r.status == 0);
  // This rank's parameters: every split one (shard.h's layout) by half, the replicated ones whole.
  const BertConfig cfg = models::bert_config("bert_tiny", 512);
  const dist::tp::TpLayout layout = dist::tp::bert_tp_layout(cfg);
  models::BertForMaskedLM canonical(cfg, 0, false);
  int64_t mine = 0, whole = 0;
  for (const auto& [name, p] : canonical.named_parameters()) {
    whole += p.numel();
    mine += layout.count(name) ? p.numel() / 2 : p.numel();
  }
  CHECK(mine < whole * 6 / 10);  // bert_tiny's split layers are most of it (the vocabulary above all)
  const nlohmann::json j = nlohmann::json::parse(tandem::testing::slurp(metrics));
  const nlohmann::json& predicted = j.at("memory_ledger").at("predicted_bytes");
  CHECK(predicted.at("params").get<int64_t>() == 4 * mine);   // f32
  CHECK(predicted.at("grads").get<int64_t>() == 4 * mine);
  CHECK(predicted.at("optimizer").get<int64_t>() == 8 * mine);  // AdamW's two moments
  const double measured = j.at("memory_ledger").at("measured_bytes").at("model_state").get<double>();
  CHECK(measured == doctest::Approx(predicted.at("model_state").get<double>()).epsilon(0.02));
}

TEST_CASE("--tp 2 --amp bf16 trains what DDP trains in bf16, up to bf16 rounding; its f32 masters resume at --tp 1") {
  // bf16: the row-parallel layers' partial products are rounded before the TP all-reduce sums them,
  // so the runs agree to bf16's precision (2^-8 relative), not to f32's. The overflow flag is
  // agreed over the world and the clipping norm is the canonical one, so every rank steps alike.
  const std::string common = "--model bert_tiny --vocab-size 512 --batch 4 --steps 5 --amp bf16 --clip 0.5 "
                             "--checkpoint-dir ";
  const std::string ddp = dir("amp_ddp"), tp = dir("amp_tp2"), resumed = dir("amp_resumed");
  const Run ref = train(2, common + ddp);
  const Run r = train(4, common + tp + " --tp 2 --zero 1");
  REQUIRE(ref.status == 0);
  REQUIRE(r.status == 0);
  REQUIRE(r.losses.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(std::abs(r.losses[i] - ref.losses[i]) <= 2e-3);
  const std::string end = "/checkpoint_step5.safetensors";
  MESSAGE("bf16 TP 2 vs DDP: ", tandem::testing::check_close_checkpoints(tp + end, ddp + end, 2e-2, kTiny));
  // The canonical checkpoint holds the assembled f32 masters ("amp.master.<param>", split like the
  // parameter): a --tp 2 run stopped at step 3 resumes at --tp 1 on 2 ranks.
  REQUIRE(train(4, common + resumed + " --tp 2 --zero 1 --run-steps 3").status == 0);
  REQUIRE(train(2, common + resumed + " --resume auto").status == 0);
  MESSAGE("resumed at --tp 1: ", tandem::testing::check_close_checkpoints(resumed + end, ddp + end, 2e-2, kTiny));
}

TEST_CASE("--tp 4 on 4 ranks equals 1 rank with the same batch (bert_mini, a vocabulary TP 4 splits unevenly)") {
  const std::string common = "--model bert_mini --vocab-size 514 --batch 4 --steps 4 --checkpoint-dir ";
  const std::string one = dir("one"), tp4 = dir("tp4");
  const Run a = train(1, common + one);
  const Run b = train(4, common + tp4 + " --tp 4");
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  check_same_losses(b, a, 4);
  tandem::testing::check_close_checkpoints(tp4 + "/checkpoint_step4.safetensors", one + "/checkpoint_step4.safetensors",
                                           1e-5, kTiny);
  // Validation gathers the masked rows' logits over the TP group: the same held-out figures.
  check_same_validation(a, b, R"(validation step 4: masked-token accuracy ([0-9.]+)% .* loss ([0-9.]+))");
}

TEST_CASE("a --tp 2 --zero 2 checkpoint resumes at --tp 1 --zero 1 on 4 ranks and on 1 rank; a DDP one at --tp 2") {
  // Split at step 3 under TP 2 x DP 2 with ZeRO-2 over DP (4 ranks x 4, 2 DP groups: the same global
  // batch of 8); the optimizer state is gathered over DP, then assembled over TP.
  resume_from_copies(stopped_at_step3("tp_half", 4, " --batch 4 --tp 2 --zero 2"), "from_tp",
                     {{4, "--batch 2 --tp 1 --zero 1"}, {1, "--batch 8"}});
  // The reverse: a DDP checkpoint (2 ranks, step 3) resumed at --tp 2 on 4 ranks.
  resume_from_copies(stopped_at_step3("ddp_half", 2, " --batch 4"), "from_ddp", {{4, "--batch 4 --tp 2"}});
}

TEST_CASE("a --zero 3 checkpoint (parameters sharded) resumes at --tp 2 --zero 1 on 4 ranks and on 1 rank") {
  // TP combines with ZeRO-1/2 over the data-parallel ranks, not with ZeRO-3 (refused, see below);
  // the checkpoints of both are canonical, so a ZeRO-3 run's file resumes under TP, and the other
  // way round (the case above). Same global batch of 8 and the same 2 data-parallel groups of 4.
  resume_from_copies(stopped_at_step3("z3_half", 2, " --batch 4 --zero 3"), "from_z3",
                     {{4, "--batch 4 --tp 2 --zero 1"}, {1, "--batch 8"}});
}

TEST_CASE("with dropout, a --tp 2 run split and resumed at --tp 2 ends byte for byte where the uninterrupted one ends") {
  // The replicated dropout (the default generator) and the per-TP-rank attention stream
  // (extra.tp_attention_rng_offset) both continue where they stopped.
  const std::string common = "--model bert_tiny --vocab-size 512 --batch 4 --steps 4 --tp 2 --checkpoint-dir ";
  const std::string whole = dir("drop_whole"), split = dir("drop_split");
  REQUIRE(train(4, common + whole + " --dropout 0.1").status == 0);
  REQUIRE(train(4, common + split + " --dropout 0.1 --run-steps 2").status == 0);
  REQUIRE(train(4, common + split + " --dropout 0.1 --resume auto").status == 0);
  tandem::testing::check_identical_checkpoints(whole + "/checkpoint_step4.safetensors",
                                               split + "/checkpoint_step4.safetensors");
}

TEST_CASE("--model-ema at --tp 2 averages what DDP averages; its checkpoint resumes at --tp 1, a DDP one at --tp 2") {
  // The average is elementwise, so each TP rank keeps its shards'; the checkpoint holds the
  // canonical one ("optimizer.ema.<param>", assembled over the TP group like the weights) and a
  // resume keeps this rank's shards of it. TP 2 x DP 2 at --batch 4 reads what DDP on 2 ranks reads.
  const std::string common = "--model bert_tiny --vocab-size 512 --batch 4 --steps 6 --model-ema 0.9 --checkpoint-dir ";
  const std::string ddp = dir("ema_ddp"), tp = dir("ema_tp2"), end = "/checkpoint_step6.safetensors";
  const Run ref = train(2, common + ddp);
  const Run r = train(4, common + tp + " --tp 2");
  REQUIRE(ref.status == 0);
  REQUIRE(r.status == 0);
  check_same_losses(r, ref, 6);
  check_same_validation(ref, r, R"(\(ema\) validation step 6: masked-token accuracy ([0-9.]+)% .* loss ([0-9.]+))");
  MESSAGE("--tp 2 vs DDP, EMA included: ", tandem::testing::check_close_checkpoints(tp + end, ddp + end, 1e-5, kTiny));
  // Split at step 3 under --tp 2, resumed at --tp 1 on 2 ranks; and a DDP split resumed at --tp 2.
  for (const auto& [name, first, then] : {std::tuple<std::string, std::string, std::string>{"ema_from_tp", "--tp 2", ""},
                                          {"ema_from_ddp", "", "--tp 2"}}) {
    CAPTURE(name);
    const std::string d = dir(name);
    REQUIRE(train(first.empty() ? 2 : 4, common + d + " " + first + " --run-steps 3").status == 0);
    const Run resumed = train(then.empty() ? 2 : 4, common + d + " " + then + " --resume auto");
    REQUIRE(resumed.status == 0);
    CHECK(resumed.output.find("resumed from") != std::string::npos);
    CHECK(resumed.output.find("has no EMA") == std::string::npos);
    MESSAGE("resumed: ", tandem::testing::check_close_checkpoints(d + end, ddp + end, 1e-4, kTiny));
  }
}

TEST_CASE("--tp refusals: the world size, the heads, --zero 3, LAMB (exit 2 and a sentence)") {
  const Run world = train(4, "--model bert_mini --tp 3");
  CHECK(world.status == 2);
  CHECK(world.output.find("--tp 3 needs a world size divisible by 3") != std::string::npos);
  const Run heads = train(4, "--model bert_tiny --tp 4");
  CHECK(heads.status == 2);
  CHECK(heads.output.find("splits the model's attention heads (2)") != std::string::npos);
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --tp 2 --zero 3", "--tp 2 with --zero 3");
  tandem::testing::check_refused(app("train_encoder") + " --synthetic --tp 2 --optimizer lamb", "--tp 2 with --optimizer lamb");
}

TEST_CASE("--memory-budget-mib refuses a DDP run whose ledger exceeds it, naming what fits; --tp 4 and --zero 3 train") {
  // bert_mini with BERT's 30522-token vocabulary: 11.2 M parameters, 213 MiB per rank predicted
  // under DDP with AdamW in f32 (the vocabulary's embedding is most of it), 56 MiB at --tp 4, 86
  // MiB at --zero 3 (activations come on top).
  const std::string common = "--model bert_mini --vocab-size 30522 --batch 2 --steps 2 --memory-budget-mib 100 ";
  const Run ddp = train(4, common);
  CHECK(ddp.status == 2);
  CHECK(ddp.output.find("the memory ledger predicts") != std::string::npos);
  CHECK(ddp.output.find("for --zero 0 on 4 ranks") != std::string::npos);
  CHECK(ddp.output.find("over --memory-budget-mib 100 (100.0 MiB)") != std::string::npos);
  CHECK(ddp.output.find("--tp 4 predicts") != std::string::npos);
  CHECK(ddp.output.find("--zero 3 predicts") != std::string::npos);
  CHECK(ddp.output.find("step 1/") == std::string::npos);  // refused before the first step
  for (const std::string fits : {"--tp 4", "--zero 3"}) {
    CAPTURE(fits);
    const Run r = train(4, common + fits);
    CHECK(r.status == 0);
    CHECK(r.losses.size() == 2);
  }
  // train_imagenet's budget: the same refusal, naming its --zero stages.
  const tandem::testing::AppRun img = tandem::testing::run_app(app("train_imagenet") +
                                                               " --synthetic --device cpu --memory-budget-mib 1");
  CHECK(img.status == 2);
  CHECK(img.has("the memory ledger predicts"));
  CHECK(img.has("over --memory-budget-mib 1 (1.0 MiB)"));
  CHECK(img.has("which does not fit either"));
  // train_imagenet has no tensor-parallel layers: --tp is refused with a sentence.
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --tp 2", "this trainer's CNNs have no "
                                 "tensor-parallel layers");
}
