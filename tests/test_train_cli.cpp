// tests/test_train_cli.cpp: train_imagenet as a new user meets it - the rough edges of issue 12.
// --describe needs no data; --evaluate reports a checkpoint's validation accuracy and loss;
// forward_check takes model weights from a training checkpoint; --epochs 0 and a --num-classes that
// contradicts the class folders are refused; unreadable files are counted in the done line and
// the metrics JSON. A batch the host cannot hold fails naming the bytes, the device and --batch; a
// checkpoint resumed into another precision says what the user can change, not which C++ option
// ("LoadOptions::cast", "load non-strictly") would allow it (issue 20's rough edges).
// Uses a tiny dataset from apps/make_dataset; binaries from TANDEM_TEST_BINARY_DIR.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/safetensors.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {
tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_cli"); }

const std::string kTiny = " --device cpu --model small_cnn --image-size 16 --batch 4 --workers 1 --lr 0.05 ";
}  // namespace

TEST_CASE("--describe needs no data") {
  AppRun o = run_app_on(0, app("train_imagenet") + " --describe --model resnet50");
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(o.has("Bottleneck"));
  CHECK(o.has("out_features=1000"));
  AppRun c = run_app_on(0, app("train_imagenet") + " --describe --model small_cnn --num-classes 7");
  INFO(c.output);
  CHECK(c.status == 0);
  CHECK(c.has("out_features=7"));
}

TEST_CASE("--bn-impl: cudnn by default, tandem selectable, --cudnn-bn kept as an alias") {
  AppRun h = run_app_on(0, app("train_imagenet") + " --help");
  INFO(h.output);
  CHECK(h.status == 0);
  CHECK(h.has("--bn-impl"));
  CHECK(h.has("{cudnn,tandem}=cudnn"));  // CLI11 prints the choices and the captured default
  for (const char* ok : {" --bn-impl tandem", " --bn-impl cudnn", " --cudnn-bn"}) {
    AppRun d = run_app_on(0, app("train_imagenet") + " --describe --model small_cnn" + ok);
    INFO(ok, "\n", d.output);
    CHECK(d.status == 0);
  }
  check_refused(app("train_imagenet") + " --describe --bn-impl cub", "--bn-impl");
  check_refused(app("train_imagenet") + " --describe --cudnn-bn --bn-impl tandem", "excludes");
}

TEST_CASE("--conv-bias-fusion (on by default) and --conv-bn-fusion (off): both values selectable, anything else refused") {
  struct Switch {
    const char* flag;
    const char* help;   // the flag's help line names its values and default
    const char* model;  // a model the switch applies to
    const char* other;  // the value that is not the default
  };
  AppRun h = run_app_on(0, app("train_imagenet") + " --help");
  INFO(h.output);
  for (const Switch& s : {Switch{"--conv-bias-fusion", "--conv-bias-fusion TEXT:{on,off}=on", "vgg11", "off"},
                          Switch{"--conv-bn-fusion", "--conv-bn-fusion TEXT:{on,off}=off", "resnet18", "on"}}) {
    CAPTURE(s.flag);
    CHECK(h.has(s.help));
    AppRun d = run_app_on(0, app("train_imagenet") + " --describe --model " + s.model + " " + s.flag + " " + s.other);
    INFO(d.output);
    CHECK(d.status == 0);
    check_refused(app("train_imagenet") + " --describe " + s.flag + " yes", s.flag);
  }
}

TEST_CASE("--epochs 0 and --steps 0 are refused instead of meaning one epoch") {
  check_refused(app("train_imagenet") + " --synthetic --epochs 0", "--epochs: must be at least 1, got 0");
  check_refused(app("train_imagenet") + " --synthetic --steps 0", "--steps: must be at least 1, got 0");
}

TEST_CASE("--device cuda without a usable GPU fails with CUDA's reason instead of training on the CPU") {
  if (tandem::probe_cuda().usable()) return;  // a working GPU: nothing to refuse
  AppRun o = run_app_on(0, app("train_imagenet") + " --device cuda --synthetic --steps 1 --model small_cnn --image-size 16");
  INFO(o.output);
  CHECK(o.status != 0);
  CHECK(o.has("train_imagenet --device cuda needs a GPU"));
  CHECK_FALSE(o.has("step 1/1"));
}

TEST_CASE("--cuda-graph: refused with a reason where a step cannot be captured") {
  const std::string tiny = " --synthetic --steps 1 --model small_cnn --image-size 16 --batch 2 ";
  check_refused(app("train_imagenet") + tiny + "--device cpu --cuda-graph --on-nonfinite off",
                "--cuda-graph captures GPU work, and --device cpu has none");
  check_refused(app("train_imagenet") + tiny + "--cuda-graph", "--cuda-graph cannot capture --on-nonfinite stop");
  // Options a captured step cannot contain: refused before any device work (validate), on any machine.
  const std::pair<const char*, const char*> conflicts[] = {
      {"--zero 1", "--cuda-graph with --zero 1 is not supported yet"},
      {"--strategy ps", "--cuda-graph cannot capture --strategy ps"},
  };
  for (const auto& [flag, message] : conflicts) {
    AppRun r = run_app_on(0, app("train_imagenet") + tiny + "--cuda-graph --on-nonfinite off " + flag);
    INFO(std::string(flag), r.output);
    CHECK(r.status == 2);
    CHECK(r.has(message));
  }
  // The update's capturable form (apps/trainer/step/step.h) takes AdamW, LAMB, AMP and clipping into the
  // graph: validate() lets them through, to a GPU run, or to the no-GPU refusal on this machine.
  for (const char* flag : {"--optimizer adamw", "--optimizer lamb", "--amp bf16", "--amp fp16", "--clip-grad-norm 1"}) {
    AppRun r = run_app_on(0, app("train_imagenet") + tiny + "--cuda-graph --on-nonfinite off " + flag);
    INFO(std::string(flag), r.output);
    CHECK(r.status != 2);
    if (!tandem::probe_cuda().usable()) CHECK(r.has("--cuda-graph needs a GPU"));
  }
  // Models with dropout are captured too (core/graph_rng.h): validate() lets vgg11 through, and it
  // trains with replays on a GPU, or meets the no-GPU refusal below on a machine without one.
  AppRun vgg = run_app_on(0, app("train_imagenet") + " --synthetic --steps 5 --log-every 5 --model vgg11 --image-size 32 "
                                              "--batch 2 --synthetic-val-size 0 --cuda-graph --on-nonfinite off");
  INFO(vgg.output);
  CHECK(vgg.status != 2);
  CHECK_FALSE(vgg.has("dropout"));
  if (!tandem::probe_cuda().usable()) {
    CHECK(vgg.status != 0);
    CHECK(vgg.has("--cuda-graph needs a GPU, and this run is on the CPU"));
  } else {
    CHECK(vgg.status == 0);
    CHECK(vgg.has("cuda graph: captured step 4"));
    CHECK(vgg.has("cuda graph 2/5 steps replayed"));
  }
  AppRun autodev = run_app_on(0, app("train_imagenet") + tiny + "--cuda-graph --on-nonfinite off");
  INFO(autodev.output);
  if (!tandem::probe_cuda().usable()) {
    CHECK(autodev.status != 0);
    CHECK(autodev.has("--cuda-graph needs a GPU, and this run is on the CPU"));
    CHECK_FALSE(autodev.has("step 1/1"));
  } else {  // a GPU with one rank (NCCL): the step is captured after 3 eager ones and replayed
    AppRun g = run_app_on(0, app("train_imagenet") +
                          " --synthetic --steps 8 --log-every 4 --model small_cnn --image-size 16 --batch 2 "
                          "--cuda-graph --on-nonfinite off");
    INFO(g.output);
    CHECK(g.status == 0);
    CHECK(g.has("cuda graph: captured step 4"));
    CHECK(g.has("cuda graph 1/4 steps replayed"));
    CHECK(g.has(" ms/replayed step, "));  // the warm-up interval: host time with and without the graph
    CHECK(g.has("cuda graph 4/4 steps replayed"));
  }
}

TEST_CASE("--num-classes beside --data must match the class folders") {
  auto& s = scratch();
  check_refused(app("train_imagenet") + kTiny + "--data " + s.data + " --num-classes 10 --epochs 1",
                "--num-classes 10 does not match the 3 class folders");
  AppRun ok = run_app_on(0, app("train_imagenet") + kTiny + "--data " + s.data + " --num-classes 3 --describe");
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(ok.has("out_features=3"));
}

TEST_CASE("--evaluate reports a checkpoint's validation top-1/top-5 and loss, as training saw them") {
  auto& s = scratch();
  const fs::path dir = s.root / "ck";
  const std::string metrics = (s.root / "train.json").string();
  // One training rank: with more, each rank validates with its own BatchNorm running statistics
  // (DDP broadcasts rank 0's only at the next forward) while the checkpoint holds rank 0's.
  AppRun t = run_app_on(1, app("train_imagenet") + kTiny + "--data " + s.data + " --epochs 1 --checkpoint-dir " + dir.string() +
                     " --metrics " + metrics);
  INFO(t.output);
  REQUIRE(t.status == 0);
  const std::string ckpt = (dir / "checkpoint_epoch1.safetensors").string();
  AppRun e = run_app_on(2, app("train_imagenet") + kTiny + "--data " + s.data + " --evaluate --resume " + ckpt);
  INFO(e.output);
  REQUIRE(e.status == 0);
  // Validation after the last epoch and the checkpoint hold the same weights: the same numbers
  // (the loss to f32 summation order: 2 ranks' partial sums here, one rank's there).
  json m = json::parse(slurp(metrics));
  char want[160];
  std::snprintf(want, sizeof want, "val top1 %.2f%% top5 %.2f%% loss ", 100 * m["final"]["val_top1"].get<double>(),
                100 * m["final"]["val_top5"].get<double>());
  const std::string head = "evaluate: " + ckpt + " (step 6): " + want;
  const size_t at = e.output.find(head);
  REQUIRE(at != std::string::npos);
  double loss = -1;
  int images = 0;
  CHECK(std::sscanf(e.output.c_str() + at + head.size(), "%lf (%d images)", &loss, &images) == 2);
  CHECK(loss == doctest::Approx(m["final"]["val_loss"].get<double>()).epsilon(1e-3));
  CHECK(images == 12);
  CHECK(!e.has("done:"));  // no training
  check_refused(app("train_imagenet") + kTiny + "--data " + s.data + " --evaluate",
                "--evaluate needs --resume CHECKPOINT");

  SUBCASE("forward_check takes the model weights from a training checkpoint") {
    const fs::path x = s.root / "x.safetensors", y = s.root / "y.safetensors";
    tandem::safetensors::save(x.string(), {{"input", tandem::Tensor::ones({2, 3, 16, 16})}});
    AppRun f = run_app_on(0, app("forward_check") + " --model small_cnn --num-classes 3 --weights " + ckpt + " --input " +
                       x.string() + " --output " + y.string());
    INFO(f.output);
    REQUIRE(f.status == 0);
    CHECK(f.has("training checkpoint (step 6): using its model weights"));
    CHECK(tandem::safetensors::load(y.string()).at("logits").shape() == tandem::Shape{2, 3});
  }
}

TEST_CASE("unreadable train and val files are counted in the done line and the metrics JSON") {
  const fs::path data = scratch().root / "data_corrupt";
  fs::remove_all(data);
  fs::copy(scratch().data, data, fs::copy_options::recursive);
  for (const char* split : {"train", "val"}) {
    for (const auto& e : fs::recursive_directory_iterator(data / split))
      if (e.is_regular_file()) {
        std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << "this is not a JPEG";
        break;
      }
  }
  const std::string metrics = (scratch().root / "corrupt.json").string();
  AppRun o = run_app_on(2, app("train_imagenet") + kTiny + "--data " + data.string() + " --epochs 1 --metrics " + metrics);
  INFO(o.output);
  REQUIRE(o.status == 0);
  CHECK(o.has("skipped files: 1 train, 1 val"));
  json m = json::parse(slurp(metrics));
  CHECK(m["skipped_files_train"] == 1);
  CHECK(m["skipped_files_val"] == 1);
  CHECK(m["skipped_files"] == 2);
}

TEST_CASE("a batch the host cannot allocate names the bytes, the device and --batch; a wrong precision names what to change") {
  // 2 x 10^6 images of 224^2 per rank: 1.1 TiB, beyond any machine's memory and swap, so the
  // allocation fails at once (no out-of-memory killer involved).
  const AppRun oom = run_app_on(2, app("train_imagenet") + " --device cpu --model small_cnn --synthetic --synthetic-size "
                                                           "4000000 --batch 2000000 --image-size 224 --num-classes 4 --steps 1");
  check_failed(oom, {"could not allocate 1.1 TiB on cpu (", "in use by tandem",
                     "(the batch size is --batch-size, now 2000000 per rank)"},
               {"done:"});

  const std::string d = (scratch().root / "precision").string();
  const std::string tiny = " --device cpu --model small_cnn --synthetic --synthetic-size 24 --num-classes 4 "
                           "--image-size 16 --batch 4 --workers 1 ";
  REQUIRE(run_app_on(1, app("train_imagenet") + tiny + "--epochs 1 --checkpoint-dir " + d).status == 0);
  const AppRun amp = run_app_on(1, app("train_imagenet") + tiny + "--epochs 2 --amp bf16 --resume auto --checkpoint-dir " + d);
  check_failed(amp, {"dtype f32 but the model holds bf16", "the same model, number of classes (or vocabulary) and precision"},
               {"LoadOptions", "non-strictly"});
}
