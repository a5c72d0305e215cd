// tests/test_train_imagenet_e2e.cpp: the README's main job in miniature. Generates a tiny dataset
// with apps/make_dataset, trains with `mpiexec -n 2 train_imagenet` on the CPU, and checks the
// metrics JSON; then checks that "2 epochs" and "1 of 2 epochs, then --resume auto" end in
// byte-identical checkpoints (model and optimizer), that --zero 3 ends where --zero 0 ends, byte
// for byte (on 2 ranks the reduce-scatter adds the same two addends as the all-reduce, and the
// gathers copy one owner's values), also across a resume, and that bad flags fail with a clear
// message.
// Binaries come from TANDEM_TEST_BINARY_DIR (set by tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {
tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_e2e"); }

// Runs train_imagenet under mpiexec -n ranks with the common tiny settings plus `args`. Returns the
// exit status; the output is also kept in <root>/<log>.
int train(int ranks, const std::string& args, const std::string& log) {
  const tandem::testing::AppRun r = tandem::testing::run_app(
      "HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(ranks) + app("train_imagenet") +
      " --device cpu --model small_cnn --image-size 16 --batch 4 --workers 1 --lr 0.1 --log-every 1 " + args);
  std::ofstream(scratch().root / log) << r.output;
  if (r.status != 0) MESSAGE("train_imagenet output:\n", r.output);
  return r.status;
}
}  // namespace

TEST_CASE("mpiexec -n 2 train_imagenet trains on a generated dataset and writes a sensible summary") {
  auto& s = scratch();
  std::string dir = (s.root / "a").string();
  REQUIRE(train(2, "--data " + s.data + " --epochs 2 --checkpoint-dir " + dir + " --metrics " + dir + "/m.json",
                "a.log") == 0);
  json m = json::parse(slurp(dir + "/m.json"));
  CHECK(m["world_size"] == 2);
  CHECK(m["steps_per_epoch"] == 3);
  CHECK(m["steps"] == 6);
  CHECK(m["global_batch"] == 8);
  CHECK(m["base_lr"].get<double>() == doctest::Approx(0.1));  // --lr as given: not scaled by the 2 ranks
  CHECK(m["init_s"].get<double>() > 0);
  CHECK(m["train_s"].get<double>() > 0);
  CHECK(m["wall_s"].get<double>() >= m["train_s"].get<double>());
  CHECK(m["images_per_s"].get<double>() > 0);
  CHECK(m["images_per_s_per_rank"].get<double>() == doctest::Approx(m["images_per_s"].get<double>() / 2));
  CHECK(std::isfinite(m["final"]["train_loss"].get<double>()));
  CHECK(m["final"]["val_images"] == 12);  // every val image counted once across the 2 ranks
  // The measured model state is the model's: the loader's prefetched batches and the step's own batch
  // are not in it (apps/trainer/run/memory.h); the last step's logits and loss are (under 100 bytes here).
  const double state = m["memory_ledger"]["measured_bytes"]["model_state"];
  const double predicted = m["memory_ledger"]["predicted_bytes"]["model_state"];
  MESSAGE("model state measured ", state, " B, predicted ", predicted, " B");
  CHECK(state == doctest::Approx(predicted).epsilon(0.01));
  double top1 = m["final"]["val_top1"], top5 = m["final"]["val_top5"];
  CHECK(top1 >= 0);
  CHECK(top5 >= top1);
  CHECK(top5 == doctest::Approx(1.0));  // 3 classes: the top 3 always hold the label
  CHECK(m["history"].size() == 2);
  CHECK(m["checkpoints_written"] == 2);
  CHECK(m["comm"]["overlap"].get<double>() >= 0);
  CHECK(m["comm"]["overlap"].get<double>() <= 1);
  CHECK(fs::exists(dir + "/checkpoint_epoch2.safetensors"));
  std::string log = slurp((s.root / "a.log").string());
  CHECK(log.find("validation: top1") != std::string::npos);
  CHECK(log.find("ms/step: data") != std::string::npos);
  CHECK(log.find(" | host ") != std::string::npos);  // host time issuing a step (what CUDA graphs cut)
}

TEST_CASE("1 of 2 epochs + --resume auto ends exactly where 2 epochs in one go end") {
  auto& s = scratch();
  std::string a = (s.root / "a").string(), b = (s.root / "b").string();
  if (!fs::exists(a + "/checkpoint_epoch2.safetensors"))
    REQUIRE(train(2, "--data " + s.data + " --epochs 2 --checkpoint-dir " + a, "a2.log") == 0);
  // --run-epochs 1 stops after one epoch of a 2-epoch schedule (a preempted job).
  REQUIRE(train(2, "--data " + s.data + " --epochs 2 --run-epochs 1 --checkpoint-dir " + b, "b1.log") == 0);
  CHECK(!fs::exists(b + "/checkpoint_epoch2.safetensors"));
  REQUIRE(train(2, "--data " + s.data + " --epochs 2 --checkpoint-dir " + b + " --resume auto --metrics " + b +
                       "/m.json", "b2.log") == 0);
  CHECK(slurp((s.root / "b2.log").string()).find("resumed from") != std::string::npos);
  json m = json::parse(slurp(b + "/m.json"));
  CHECK(m["steps_this_run"] == 3);
  // The resumed run's optimizer state exists before its first step (loaded from the checkpoint):
  // it is model state, not what the ledger subtracts as "other" (which made this 0 at e25430b).
  const double state = m["memory_ledger"]["measured_bytes"]["model_state"];
  const double predicted = m["memory_ledger"]["predicted_bytes"]["model_state"];
  MESSAGE("resumed: model state measured ", state, " B, predicted ", predicted, " B");
  CHECK(state == doctest::Approx(predicted).epsilon(0.01));
  CHECK(m["bn_impl"] == "cpu");   // --bn-impl picks a GPU BatchNorm; the CPU has one
  CHECK(m["conv_bias_fusion"]["setting"] == "cpu");  // --conv-bias-fusion picks a cuDNN graph; the CPU has none
  CHECK(m["conv_bias_fusion"]["fused_calls"] == 0);
  CHECK(m["bad_labels"] == 0);    // only the CUDA loss clamps and counts (CPU labels throw)
  tandem::testing::check_identical_checkpoints(a + "/checkpoint_epoch2.safetensors", b + "/checkpoint_epoch2.safetensors");
  CHECK(tandem::safetensors::load(a + "/checkpoint_epoch2.safetensors").metadata.at("step") == "6");
}

TEST_CASE("--amp fp16 and bf16 train under mpiexec -n 2 and report the loss scale") {
  tandem::testing::TinyImageDataset& s = scratch();
  for (std::string amp : {"fp16", "bf16"}) {
    std::string mj = (s.root / ("amp_" + amp + ".json")).string(), ck = (s.root / ("amp_" + amp)).string();
    REQUIRE(train(2, "--data " + s.data + " --epochs 1 --amp " + amp + " --checkpoint-dir " + ck + " --metrics " + mj,
                  "amp_" + amp + ".log") == 0);
    json m = json::parse(slurp(mj));
    CHECK(m["amp"] == amp);
    CHECK(std::isfinite(m["final"]["train_loss"].get<double>()));
    // fp16 starts at 2^16 and only backs off (3 steps are far from the 2000-step growth interval);
    // bf16 needs no scaling.
    if (amp == "fp16") {
      CHECK(m["loss_scale"].get<double>() <= 65536.0);
      CHECK(m["loss_scale"].get<double>() * (1 << m["skipped_steps"].get<int>()) == 65536.0);
    } else {
      CHECK(m["loss_scale"].get<double>() == 1.0);
    }
    CHECK(slurp((s.root / ("amp_" + amp + ".log")).string()).find("loss scale") != std::string::npos);
    // The checkpoint holds 16-bit weights, f32 BatchNorm, the f32 masters and the scaler.
    auto c = tandem::safetensors::load(ck + "/checkpoint_epoch1.safetensors");
    bool master = false, scale = false;
    for (const auto& [name, t] : c.tensors) {
      master |= name.find("amp.master.") != std::string::npos && t.dtype() == tandem::DType::F32;
      scale |= name.find("amp.scaler.scale") != std::string::npos;
    }
    CHECK(master);
    CHECK(scale);
  }
}

TEST_CASE("synthetic compute-only mode runs a fixed number of steps") {
  auto& s = scratch();
  std::string mj = (s.root / "syn.json").string();
  REQUIRE(train(2, "--synthetic --num-classes 10 --synthetic-val-size 16 --steps 4 --metrics " + mj, "syn.log") == 0);
  json m = json::parse(slurp(mj));
  CHECK(m["steps"] == 4);
  CHECK(m["data"] == "synthetic");
  CHECK(m["final"]["val_images"] == 16);
}

TEST_CASE("ZeRO-2 with AdamW, clipping and the poly schedule; the metrics carry the memory ledger") {
  auto& s = scratch();
  std::string mj = (s.root / "zero.json").string();
  REQUIRE(train(2, "--synthetic --num-classes 10 --synthetic-val-size 16 --steps 4 --zero 2 --optimizer adamw "
                   "--betas 0.9,0.98 --eps 1e-6 --clip-grad-norm 1 --no-lr-scaling --lr-schedule poly --lr-power 1 "
                   "--metrics " + mj, "zero.log") == 0);
  json m = json::parse(slurp(mj));
  CHECK(m["steps"] == 4);
  CHECK(m["optimizer"]["zero"] == 2);
  CHECK(m["memory_ledger"]["formula"] == "4Ψ + 4Ψ/N + 8Ψ/N");
  CHECK(m["memory_ledger"]["measured_bytes"]["model_state"].get<double>() > 0);
  CHECK(std::isfinite(m["final"]["train_loss"].get<double>()));
}

TEST_CASE("--amp bf16 --zero 2 with clipping: mixed-precision ledger, canonical masters, resume at --zero 1 exact") {
  auto& s = scratch();
  const std::string a = (s.root / "amp_zero_a").string(), b = (s.root / "amp_zero_b").string();
  const std::string flags = "--data " + s.data + " --epochs 2 --amp bf16 --optimizer adamw --clip-grad-norm 1 ";
  REQUIRE(train(2, flags + "--zero 2 --checkpoint-dir " + a + " --metrics " + a + "/m.json", "amp_zero_a.log") == 0);
  json m = json::parse(slurp(a + "/m.json"));
  CHECK(m["optimizer"]["zero"] == 2);
  CHECK(m["memory_ledger"]["mixed_precision"] == true);
  CHECK(m["memory_ledger"]["formula"] == "2Ψ + 2Ψ/N + 12Ψ/N (+ 4Ψ/N f32 master grads)");
  CHECK(m["memory_ledger"]["predicted_bytes"]["master_weights"].get<double>() > 0);
  CHECK(std::isfinite(m["final"]["train_loss"].get<double>()));
  // The masters are f32 and unsharded: each has its parameter's element count.
  auto c = tandem::safetensors::load(a + "/checkpoint_epoch2.safetensors");
  std::map<std::string, int64_t> numel;
  for (const auto& [name, t] : c.tensors) numel[name] = t.numel();
  int masters = 0;
  for (const auto& [name, t] : c.tensors) {
    const std::string prefix = "optimizer.amp.master.";  // checkpoint/checkpoint.h: optimizer entries
    if (name.rfind(prefix, 0) != 0) continue;
    ++masters;
    CHECK(t.dtype() == tandem::DType::F32);
    CHECK(numel[name.substr(prefix.size())] == t.numel());
  }
  CHECK(masters > 0);
  // One epoch at ZeRO-2, the second at ZeRO-1 from its checkpoint: the same bytes as two at ZeRO-2
  // (two ranks: the reduce-scatter and the all-reduce add the same two addends).
  REQUIRE(train(2, flags + "--zero 2 --run-epochs 1 --checkpoint-dir " + b, "amp_zero_b1.log") == 0);
  REQUIRE(train(2, flags + "--zero 1 --resume auto --checkpoint-dir " + b, "amp_zero_b2.log") == 0);
  tandem::testing::check_identical_checkpoints(a + "/checkpoint_epoch2.safetensors", b + "/checkpoint_epoch2.safetensors");
  // The same epoch-end checkpoint resumes on one rank without ZeRO (the masters are unsharded).
  const std::string one = (s.root / "amp_zero_one").string();
  fs::create_directories(one);
  fs::copy_file(b + "/checkpoint_epoch1.safetensors", one + "/checkpoint_epoch1.safetensors");
  REQUIRE(train(1, flags + "--zero 0 --resume auto --checkpoint-dir " + one, "amp_zero_c.log") == 0);
  CHECK(slurp((s.root / "amp_zero_c.log").string()).find("resumed from") != std::string::npos);
}

TEST_CASE("--zero 3 equals --zero 0 byte for byte (AdamW, clipping), resumes from --zero 3 into --zero 1; its ledger") {
  auto& s = scratch();
  const std::string flags = "--data " + s.data + " --epochs 2 --optimizer adamw --clip-grad-norm 1 ";
  const std::string d = (s.root / "z3_ddp").string(), z = (s.root / "z3").string(), r = (s.root / "z3_r").string();
  REQUIRE(train(2, flags + "--zero 0 --checkpoint-dir " + d, "z3_ddp.log") == 0);
  REQUIRE(train(2, flags + "--zero 3 --checkpoint-dir " + z + " --metrics " + z + "/m.json", "z3.log") == 0);
  tandem::testing::check_identical_checkpoints(d + "/checkpoint_epoch2.safetensors", z + "/checkpoint_epoch2.safetensors",
                                              true);
  const json m = json::parse(slurp(z + "/m.json"));
  CHECK(m["optimizer"]["zero"] == 3);
  CHECK(m["memory_ledger"]["formula"] == "4Ψ/N + 4Ψ/N + 8Ψ/N");
  // Between steps the model state is this rank's shards and moments only: the ledger's, within 2 %.
  CHECK(m["memory_ledger"]["measured_bytes"]["model_state"].get<double>() ==
        doctest::Approx(m["memory_ledger"]["predicted_bytes"]["model_state"].get<double>()).epsilon(0.02));
  // One epoch at ZeRO-3, the second at ZeRO-1 from its (canonical) checkpoint: the same bytes.
  REQUIRE(train(2, flags + "--zero 3 --run-epochs 1 --checkpoint-dir " + r, "z3_r1.log") == 0);
  REQUIRE(train(2, flags + "--zero 1 --resume auto --checkpoint-dir " + r, "z3_r2.log") == 0);
  tandem::testing::check_identical_checkpoints(d + "/checkpoint_epoch2.safetensors", r + "/checkpoint_epoch2.safetensors",
                                              true);
}

TEST_CASE("bad flags fail with a message that says what to do") {
  auto fails_with = [](const std::string& args, const std::string& text) {
    tandem::testing::check_refused(app("train_imagenet") + " " + args, text);
  };
  fails_with("--synthetic --amp fp8", "--amp");
  fails_with("--synthetic --zero 3 --strategy ps", "use one of --zero or --strategy ps");
  fails_with("--synthetic --betas 0.9,0.99", "--optimizer adamw");
  fails_with("--synthetic --compress int8", "--compress");
  fails_with("--epochs 1", "no data");
  fails_with("--synthetic --epochs 1 --steps 3", "excludes");
  fails_with("--data /nonexistent/dir", "--data");
}

TEST_CASE("both trainers refuse the Step's impossible combinations in the same words") {
  const std::pair<std::string, std::string> refused[] = {
      {"--zero 4", "--zero"},
      {"--zero 3 --compress bf16", "--zero 3 with --compress"},
      {"--zero 3 --compress fp16", "--zero 3 with --compress"},
      {"--zero 2 --compress bf16", "--zero 2 with --compress"},
  };
  for (const std::string program : {"train_imagenet", "train_encoder"})
    for (const auto& [args, text] : refused) tandem::testing::check_refused(app(program) + " --synthetic " + args, text);
}

TEST_CASE("a corrupt image is skipped with a warning and counted; --strict makes it fatal") {
  // A copy of the tiny dataset with one training image replaced by garbage bytes.
  fs::path data = scratch().root / "data_corrupt";
  fs::remove_all(data);
  fs::copy(scratch().data, data, fs::copy_options::recursive);
  fs::path victim;
  for (const auto& e : fs::recursive_directory_iterator(data / "train"))
    if (e.is_regular_file()) { victim = e.path(); break; }
  REQUIRE(!victim.empty());
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << "this is not a JPEG";
  std::string metrics = (scratch().root / "corrupt.json").string();
  CHECK(train(1, "--data " + data.string() + " --epochs 1 --metrics " + metrics, "corrupt.log") == 0);
  std::string log = slurp((scratch().root / "corrupt.log").string());
  CHECK(log.find(victim.filename().string()) != std::string::npos);  // the warning names the file
  CHECK(json::parse(slurp(metrics))["skipped_files"].get<int>() == 1);
  CHECK(train(1, "--data " + data.string() + " --epochs 1 --strict", "strict.log") != 0);
  CHECK(slurp((scratch().root / "strict.log").string()).find(victim.filename().string()) != std::string::npos);
}
