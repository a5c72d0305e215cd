// tests/test_resume_world_size.cpp: train_imagenet resumed on another world size or --batch, at an
// epoch end and inside an epoch (issue 20, defect 2), under real mpiexec processes on the tiny
// dataset of apps/make_dataset (24 training images: 3 steps per epoch at 2 ranks x batch 4).
//
//  - The case, with the default settings: --epochs 4 --run-epochs 2 on 2 ranks, then
//    --resume auto on 4 ranks and on 1. Before: 4 ranks printed "done: 0 steps" (two epochs skipped)
//    and 1 rank stopped at step 18 of 24 with the cosine LR at a fifth of its peak, and both warned
//    "pass the same --epochs" though the user had. Now both train to epoch 4, the LR ends near 0 and
//    the checkpoint counts the samples seen; the warning comes only when --epochs really changed.
//  - The same global batch on another world size (2 x 4 -> 1 x 8 and 4 x 2), at an epoch end and
//    mid-epoch (--run-steps 4: 8 samples into epoch 1): the resumed run reads the same samples in
//    the same global order with the same LR, so it ends where the uninterrupted run ends up to the
//    order of the sums (1e-4 of each tensor's magnitude; measured ~1e-6). The model is
//    small_cnn_nobn and the LR unscaled (--no-lr-scaling, --warmup-epochs 1): BatchNorm's per-rank
//    batch statistics, and the linear scaling rule's LR x ranks, legitimately differ across world
//    sizes (dropout's per-rank streams would too; this model has none).
//  - Another --batch (global batch 8 -> 4), at an epoch end and mid-epoch: the schedule continues in
//    samples and ends where it should - at epoch 4, with every epoch's samples counted and the last
//    LR near 0.
// Binaries come from TANDEM_TEST_BINARY_DIR (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/safetensors.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_resume_ws"); }

// mpiexec -n ranks train_imagenet on the tiny dataset with `args`; the output is kept in <root>/<log>.
AppRun train(int ranks, const std::string& args, const std::string& log) {
  const AppRun r = tandem::testing::run_app(
      "HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(ranks) + app("train_imagenet") +
      " --device cpu --image-size 16 --workers 1 --lr 0.05 --log-every 1 --data " + scratch().data + " " + args);
  std::ofstream(scratch().root / log) << r.output;
  if (r.status != 0) MESSAGE("train_imagenet output:\n", r.output);
  return r;
}

std::string dir(const std::string& name) { return (scratch().root / name).string(); }

std::string meta(const std::string& file, const std::string& key) {
  return tandem::safetensors::read_metadata(file).at(key);
}

// The LR of the last progress line ("... | lr 0.0002143 | ...").
double last_lr(const std::string& output) {
  const size_t at = output.rfind(" | lr ");
  REQUIRE(at != std::string::npos);
  return std::stod(output.substr(at + 6));
}

// A copy of a checkpoint folder (each resume gets its own, from the same first half).
std::string copy_of(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

// The equality cases' settings: no BatchNorm, the LR not scaled by the world size, warmup in epochs.
const std::string kExact = "--model small_cnn_nobn --no-lr-scaling --warmup-epochs 1 --epochs 4 ";

// The uninterrupted run the equality cases compare with: 2 ranks x batch 4, 4 epochs (12 steps).
const std::string& uninterrupted() {
  static const std::string file = [] {
    REQUIRE(train(2, kExact + "--batch 4 --checkpoint-dir " + dir("whole"), "whole.log").status == 0);
    return dir("whole") + "/checkpoint_epoch4.safetensors";
  }();
  return file;
}

}  // namespace

TEST_CASE("the issue's case: --run-epochs 2 on 2 ranks, resumed on 4 ranks and on 1, trains to epoch 4 with the LR at ~0") {
  const std::string half = dir("issue");
  REQUIRE(train(2, "--model small_cnn --batch 4 --epochs 4 --run-epochs 2 --checkpoint-dir " + half, "issue.log")
              .status == 0);
  REQUIRE(fs::exists(half + "/checkpoint_epoch2.safetensors"));
  CHECK(meta(half + "/checkpoint_epoch2.safetensors", "data.samples") == "48");  // 6 steps x 8

  // 4 ranks x 4 = 16 samples a step: one step per epoch, two epochs left.
  const std::string four = copy_of(half, dir("issue4"));
  const AppRun r4 = train(4, "--model small_cnn --batch 4 --epochs 4 --checkpoint-dir " + four + " --resume auto",
                          "issue4.log");
  REQUIRE(r4.status == 0);
  CHECK(r4.has("done: 2 steps"));  // was "done: 0 steps": two epochs silently skipped
  CHECK_FALSE(r4.has("pass the same --epochs"));
  const std::string end4 = four + "/checkpoint_epoch4.safetensors";
  CHECK(fs::exists(end4));
  if (fs::exists(end4)) {
    CHECK(meta(end4, "epoch") == "4");
    CHECK(meta(end4, "data.samples") == "80");  // 48 + 2 x 16
    CHECK(meta(end4, "step") == "8");
  }

  // 1 rank x 4: six steps per epoch, twelve left; the cosine schedule (peak 0.05 on one rank) ends near 0.
  const std::string one = copy_of(half, dir("issue1"));
  const AppRun r1 = train(1, "--model small_cnn --batch 4 --epochs 4 --checkpoint-dir " + one + " --resume auto",
                          "issue1.log");
  REQUIRE(r1.status == 0);
  CHECK(r1.has("done: 12 steps"));  // was: stopped at step 18 of 24
  CHECK(r1.has("step 18/18"));
  CHECK_FALSE(r1.has("pass the same --epochs"));
  const std::string end1 = one + "/checkpoint_epoch4.safetensors";
  CHECK(fs::exists(end1));
  if (fs::exists(end1)) CHECK(meta(end1, "data.samples") == "96");  // 4 epochs x 24
  const double lr = last_lr(r1.output);
  MESSAGE("the last step's LR on 1 rank: ", lr, " (peak 0.05)");
  CHECK(lr < 0.01 * 0.05);  // was 0.0098: a fifth of the peak

  // Only a changed length warns: --epochs 5 does.
  const std::string longer = copy_of(half, dir("issue5"));
  const AppRun r5 = train(2, "--model small_cnn --batch 4 --epochs 5 --run-epochs 1 --checkpoint-dir " + longer +
                                 " --resume auto", "issue5.log");
  REQUIRE(r5.status == 0);
  CHECK(r5.has("the checkpoint's run was 4 epochs long, this one is 5 epochs"));
}

namespace {
// The run in `half` (2 ranks x 4) resumed from copies of its folder on 1 rank x 8 and on 4 ranks x 2,
// the same global batch of 8 (copies and logs named <name>_np<ranks>): each run's output holds every
// one of `says`, and its last checkpoint (step 12, 96 samples) is `a`'s up to reduction order.
void resume_on_1_and_4_ranks(const std::string& a, const std::string& half, const std::string& name,
                             std::initializer_list<std::string> says) {
  for (const auto& [ranks, batch] : {std::pair{1, 8}, std::pair{4, 2}}) {
    CAPTURE(ranks);
    const std::string copy = name + "_np" + std::to_string(ranks);
    const std::string d = copy_of(half, dir(copy));
    const AppRun r =
        train(ranks, kExact + "--batch " + std::to_string(batch) + " --resume auto --checkpoint-dir " + d, copy + ".log");
    REQUIRE(r.status == 0);
    for (const std::string& text : says) CHECK(r.has(text));
    const std::string b = d + "/checkpoint_epoch4.safetensors";
    REQUIRE(fs::exists(b));
    CHECK(meta(b, "step") == "12");
    CHECK(meta(b, "data.samples") == "96");
    tandem::testing::check_close_checkpoints(a, b, 1e-4);
  }
}
}  // namespace

TEST_CASE("the same global batch on 1 and 4 ranks, resumed at an epoch end: the uninterrupted run, up to reduction order") {
  const std::string a = uninterrupted();
  const std::string half = dir("end");
  REQUIRE(train(2, kExact + "--batch 4 --run-epochs 2 --checkpoint-dir " + half, "end.log").status == 0);
  resume_on_1_and_4_ranks(a, half, "end", {"done: 6 steps"});
}

TEST_CASE("the same global batch on 1 and 4 ranks, resumed mid-epoch: the uninterrupted run, up to reduction order") {
  const std::string a = uninterrupted();
  const std::string half = dir("mid");
  // 4 steps: the first epoch (3) and one step of the second, 8 of its 24 samples.
  REQUIRE(train(2, kExact + "--batch 4 --run-steps 4 --checkpoint-dir " + half, "mid.log").status == 0);
  const std::string saved = half + "/checkpoint_epoch2_step4.safetensors";  // inside the second epoch
  REQUIRE(fs::exists(saved));
  CHECK(fs::exists(half + "/checkpoint_epoch1.safetensors"));
  CHECK(meta(saved, "data.epoch_offset") == "8");
  resume_on_1_and_4_ranks(a, half, "mid", {"8 samples into the epoch", "done: 8 steps"});
}

TEST_CASE("another --batch, at an epoch end and mid-epoch: the schedule continues in samples and ends at epoch 4 near 0") {
  for (const std::string stop : {"--run-epochs 2", "--run-steps 4"}) {
    CAPTURE(stop);
    const std::string d = dir(stop == "--run-epochs 2" ? "batch_end" : "batch_mid");
    const std::string common = "--model small_cnn --epochs 4 --checkpoint-dir " + d + " ";
    REQUIRE(train(2, common + "--batch 4 " + stop, "batch_a.log").status == 0);
    // Global batch 4: six steps per epoch.
    const AppRun r = train(2, common + "--batch 2 --resume auto", "batch_b.log");
    REQUIRE(r.status == 0);
    CHECK(r.has(stop == "--run-epochs 2" ? "done: 12 steps" : "done: 16 steps"));
    CHECK_FALSE(r.has("pass the same --epochs"));
    const std::string end = d + "/checkpoint_epoch4.safetensors";
    REQUIRE(fs::exists(end));
    CHECK(meta(end, "epoch") == "4");
    CHECK(meta(end, "data.samples") == "96");  // every epoch's 24 samples, at either batch
    CHECK(meta(end, "data.global_batch") == "4");
    const double lr = last_lr(r.output);
    MESSAGE(stop, ": the last step's LR ", lr, " (peak 0.1)");
    CHECK(lr < 0.01 * 0.1);
  }
}
