// tests/test_train_weights.cpp: train_imagenet's pretrained weights, --evaluate from a checkpoint's
// metadata, validation that equals the saved checkpoint on any number of ranks, --model-ema,
// --sync-bn, and the memory ledger after a resume (issue 21).
//
// The torchvision-named file is made here, with no download: resnet_tiny carries torchvision's
// ResNet names (conv1, bn1, layer1.0.conv1, ..., fc) and layouts (OIHW), and a trained checkpoint's
// model tensors are written back with tandem's safetensors writer and no metadata - exactly what
// safetensors.torch.save_file(model.state_dict(), f) writes. The validation equalities compare
// top-1 as printed (two decimals of a count over 12 images: equal counts print equal), not the
// loss, whose last digit depends on how the ranks split the batches.
// Binaries come from TANDEM_TEST_BINARY_DIR (set by tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "core/safetensors.h"
#include "checkpoint/checkpoint.h"
#include "tests/support/app_runner.h"
#include "tests/support/checkpoint_compare.h"

namespace fs = std::filesystem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_weights"); }

std::string dir(const std::string& name) { return (scratch().root / name).string(); }

// train_imagenet on `ranks` ranks on the CPU plus `args` (kTiny: the tiny model, image and batch); the output is kept in <root>/<log>.
AppRun run(int ranks, const std::string& args, const std::string& log) {
  AppRun r = tandem::testing::run_app("HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(ranks) + app("train_imagenet") +
                                      " --device cpu --workers 1 --lr 0.05 --log-every 1 " + args);
  std::ofstream(scratch().root / log) << r.output;
  if (r.status != 0) MESSAGE("train_imagenet ", args, " ended with status ", r.status, ":\n", r.output);
  return r;
}

const std::string kTiny = "--model resnet_tiny --image-size 16 --batch 4 ";

// The number after `prefix` in the output ("epoch 1 validation: top1 " -> "41.67").
std::string after(const std::string& out, const std::string& prefix) {
  const size_t at = out.rfind(prefix);
  if (at == std::string::npos) return "(no '" + prefix + "')";
  return out.substr(at + prefix.size(), out.find('%', at + prefix.size()) - at - prefix.size());
}

// A plain state dict (no metadata, torchvision's names) from a checkpoint's model tensors, minus `drop`.
std::string state_dict_file(const std::string& checkpoint, const std::string& name, const std::string& drop = "") {
  tandem::Checkpoint c = tandem::read_checkpoint(checkpoint);
  tandem::NamedTensors sd;
  for (auto& [n, t] : c.model)
    if (n != drop) sd.emplace_back(n, t);
  const std::string path = dir(name);
  tandem::safetensors::save(path, sd);
  return path;
}

// One 2-rank run of 2 epochs shared by several cases: a checkpoint per epoch, validation after each.
const std::string& trained() {
  static const std::string ck = [] {
    const std::string d = dir("base");
    const AppRun r = run(2, kTiny + "--data " + scratch().data + " --epochs 2 --val-every 1 --keep-checkpoints 0 "
                             "--checkpoint-dir " + d, "base.log");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return d;
  }();
  return ck;
}

}  // namespace

TEST_CASE("--weights: a torchvision-named state dict round-trips; --evaluate takes it; strict names the tensor") {
  const std::string ck = trained() + "/checkpoint_epoch2.safetensors";
  const std::string sd = state_dict_file(ck, "resnet_tiny.safetensors");
  // torchvision's ResNet names and layouts, as a torchvision state_dict() has them.
  const tandem::safetensors::File f = tandem::safetensors::load(sd);
  std::map<std::string, tandem::Shape> shapes;
  for (const auto& [n, t] : f.tensors) shapes[n] = t.shape();
  CHECK(f.metadata.count("format") == 0);
  for (const char* n : {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                        "layer1.0.bn2.bias", "fc.weight", "fc.bias"})
    CHECK_MESSAGE(shapes.count(n) == 1, n);
  CHECK(shapes["conv1.weight"][1] == 3);  // OIHW: [out, in = RGB, kh, kw]

  // --evaluate of the plain weights = --evaluate of the checkpoint = the training log's last line.
  const AppRun ev_sd = run(1, kTiny + "--data " + scratch().data + " --evaluate --weights " + sd, "ev_sd.log");
  const AppRun ev_ck = run(1, "--data " + scratch().data + " --evaluate --resume " + ck, "ev_ck.log");
  INFO(ev_sd.output, ev_ck.output);
  REQUIRE(ev_sd.status == 0);
  REQUIRE(ev_ck.status == 0);
  const std::string logged = after(slurp(dir("base.log")), "epoch 2 validation: top1 ");
  CHECK(after(ev_sd.output, "val top1 ") == logged);
  CHECK(after(ev_ck.output, "val top1 ") == logged);
  CHECK(ev_ck.has("evaluate: resnet_tiny at 16 px (from the checkpoint)"));  // model and image size from the checkpoint, no flags

  // Training from it: every tensor loaded, the run starts where the weights are (loss well below ln 3).
  const AppRun tr = run(2, kTiny + "--data " + scratch().data + " --epochs 1 --weights " + sd, "from_sd.log");
  INFO(tr.output);
  CHECK(tr.status == 0);
  CHECK(tr.has("weights: " + sd + " (a state dict): "));
  CHECK(!tr.has("--weights-skip):"));

  // A new head for 5 classes: fc.* keeps its fresh init, said in one line.
  const AppRun ft = run(2, kTiny + "--synthetic --num-classes 5 --synthetic-size 32 --synthetic-val-size 8 --steps 2 "
                           "--weights " + sd + " --weights-skip 'fc.*'", "finetune.log");
  INFO(ft.output);
  CHECK(ft.status == 0);
  CHECK(std::regex_search(ft.output, std::regex(R"(2 kept at their initialisation \(--weights-skip\): fc\.(weight|bias), fc\.(weight|bias))")));
  // Without the skip the head's shapes differ: named, with the flag to use.
  const AppRun head = run(1, kTiny + "--synthetic --num-classes 5 --steps 1 --weights " + sd, "head.log");
  tandem::testing::check_failed(head, 120, {"fc.weight", "--weights-skip"}, {"WeightsOptions"});
  CHECK(head.status == 2);  // a usage error, printed once

  // Strict: a tensor missing from the file is named, and --weights-skip suggested.
  const std::string partial = state_dict_file(ck, "partial.safetensors", "layer1.0.bn1.bias");
  const AppRun miss = run(2, kTiny + "--data " + scratch().data + " --epochs 1 --weights " + partial, "missing.log");
  tandem::testing::check_failed(miss, 120, {"missing from the file: layer1.0.bn1.bias", "--weights-skip"});
  // A pattern that hits nothing is a typo, not a silent no-op.
  const AppRun typo = run(1, kTiny + "--data " + scratch().data + " --epochs 1 --weights " + sd + " --weights-skip 'fcc.*'",
                          "typo.log");
  tandem::testing::check_failed(typo, 120, {"--weights-skip pattern 'fcc.*' matches no tensor"});
}

TEST_CASE("--evaluate reads model and image size from the checkpoint; a contradicting flag names both values") {
  const std::string ck = trained() + "/checkpoint_epoch2.safetensors";
  const AppRun model = run(1, "--data " + scratch().data + " --evaluate --model resnet18 --resume " + ck, "ev_m.log");
  tandem::testing::check_failed(model, 60, {"--model resnet18", "--model resnet_tiny"});
  const AppRun size = run(1, "--data " + scratch().data + " --evaluate --image-size 32 --resume " + ck, "ev_s.log");
  tandem::testing::check_failed(size, 60, {"--image-size 32", "--image-size 16"});
  // The same values given explicitly are fine.
  const AppRun same = run(1, kTiny + "--data " + scratch().data + " --evaluate --resume " + ck, "ev_same.log");
  CHECK(same.status == 0);
  CHECK(tandem::read_train_state(ck).extra.at("image_size") == "16");
  // --weights and --resume: two sources of weights for one run.
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --weights " + ck + " --resume " + ck,
                                 "pass one of them");
}

TEST_CASE("on 2 and 4 ranks the logged validation equals --evaluate of that epoch's checkpoint on 1 and 2 ranks") {
  for (int ranks : {2, 4}) {
    const std::string d = dir("bn" + std::to_string(ranks));
    const AppRun r = run(ranks, kTiny + "--data " + scratch().data + " --epochs 2 --val-every 1 --keep-checkpoints 0 "
                                "--checkpoint-dir " + d, "bn" + std::to_string(ranks) + ".log");
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (int epoch : {1, 2}) {  // counted from 1: "epoch 2 validation" and checkpoint_epoch2 are the same epoch's
      const std::string logged = after(r.output, "epoch " + std::to_string(epoch) + " validation: top1 ");
      const std::string ck = d + "/checkpoint_epoch" + std::to_string(epoch) + ".safetensors";
      for (int eval_ranks : {1, 2}) {
        const AppRun ev = run(eval_ranks, "--data " + scratch().data + " --evaluate --resume " + ck, "bn_ev.log");
        INFO(ev.output);
        REQUIRE(ev.status == 0);
        CHECK_MESSAGE(after(ev.output, "val top1 ") == logged, ranks, " ranks, epoch ", epoch, ", --evaluate on ",
                      eval_ranks);
      }
    }
  }
}

TEST_CASE("--model-ema: validated and saved beside the raw weights, --evaluate scores it, a resume keeps it exact") {
  const std::string flags = kTiny + "--data " + scratch().data + " --epochs 2 --val-every 1 --model-ema 0.9 ";
  const std::string a = dir("ema_a"), b = dir("ema_b");
  const AppRun whole = run(2, flags + "--checkpoint-dir " + a + " --metrics " + a + "/m.json", "ema_a.log");
  INFO(whole.output);
  REQUIRE(whole.status == 0);
  CHECK(whole.has("epoch 2 validation (ema): top1 "));
  const tandem::Checkpoint c = tandem::read_checkpoint(a + "/checkpoint_epoch2.safetensors");
  int ema = 0;
  for (const auto& [n, t] : c.optimizer)
    if (n.rfind("ema.", 0) == 0) {
      ++ema;
      if (n == "ema.conv1.weight") CHECK(t.shape()[1] == 3);  // PyTorch's OIHW, as the weight itself
    }
  int params = 0;
  for (const auto& [n, t] : c.model)
    if (n.find("running_") == std::string::npos && n.find("num_batches") == std::string::npos) ++params;
  CHECK(ema == params);
  CHECK(c.state.extra.at("model_ema_decay") == "0.900000");
  const AppRun ev = run(1, "--data " + scratch().data + " --evaluate --resume " + a + "/checkpoint_epoch2.safetensors",
                        "ema_ev.log");
  INFO(ev.output);
  REQUIRE(ev.status == 0);
  CHECK(after(ev.output, "evaluate (ema): " + a + "/checkpoint_epoch2.safetensors: val top1 ") ==
        after(whole.output, "epoch 2 validation (ema): top1 "));
  // 1 epoch, then the second from its checkpoint: the same bytes, the EMA included.
  REQUIRE(run(2, flags + "--run-epochs 1 --checkpoint-dir " + b, "ema_b1.log").status == 0);
  const AppRun resumed = run(2, flags + "--resume auto --checkpoint-dir " + b + " --metrics " + b + "/m.json", "ema_b2.log");
  // The memory ledger after the resume measures what the straight run measures (the checkpoint's
  // EMA copy, freed after set-up, is not counted as held memory).
  tandem::testing::check_resumed_run(resumed, a, b, "checkpoint_epoch2.safetensors");
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --zero 3 --model-ema", "--zero 3");
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --strategy ps --model-ema", "--strategy ps");
  tandem::testing::check_refused(app("train_imagenet") + " --synthetic --model-ema-decay 0.9", "--model-ema");
}

TEST_CASE("--sync-bn: 2 ranks x batch 4 equal 1 rank x batch 8 on a BatchNorm model, up to reduction order") {
  // Same global batches and LR (no scaling, no warmup); small_cnn has BatchNorm, whose per-rank
  // statistics make plain DDP differ from one rank (tests/test_resume_world_size.cpp).
  const std::string common = "--model small_cnn --image-size 16 --data " + scratch().data +
                             " --epochs 2 --no-lr-scaling --warmup-epochs 0 --keep-checkpoints 0 ";
  const std::string one = dir("sbn1"), two = dir("sbn2"), plain = dir("sbn_plain");
  REQUIRE(run(1, common + "--batch 8 --checkpoint-dir " + one, "sbn1.log").status == 0);
  const AppRun r = run(2, common + "--batch 4 --sync-bn --checkpoint-dir " + two, "sbn2.log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const double synced = tandem::testing::check_close_checkpoints(one + "/checkpoint_epoch2.safetensors",
                                                                 two + "/checkpoint_epoch2.safetensors", 1e-4);
  // Without --sync-bn the same comparison fails by far: the test can tell the two apart.
  REQUIRE(run(2, common + "--batch 4 --checkpoint-dir " + plain, "sbn_plain.log").status == 0);
  const tandem::Checkpoint a = tandem::read_checkpoint(one + "/checkpoint_epoch2.safetensors");
  const tandem::Checkpoint b = tandem::read_checkpoint(plain + "/checkpoint_epoch2.safetensors");
  double worst = 0;
  for (size_t i = 0; i < a.model.size(); ++i) {
    if (a.model[i].first.find("running_var") == std::string::npos) continue;
    const std::vector<float> x = a.model[i].second.to_vector(), y = b.model[i].second.to_vector();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, double(std::abs(x[k] - y[k]) / std::max(1.0f, std::abs(x[k]))));
  }
  MESSAGE("--sync-bn vs 1 rank: ", synced, "; plain DDP's running_var vs 1 rank: ", worst);
  CHECK(worst > 1e-3);
}
