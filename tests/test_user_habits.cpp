// tests/test_user_habits.cpp: issue 30's smaller gaps a torchvision user meets: --lr-min (the floor
// cosine decays to), image files that are not decoded (.webp) counted instead of silently dropped,
// --model-ema's help not showing a default that reads as "on", the run log's documented
// "checkpoint" event (plot_run.py's schema) actually written, and a bare --amp refused instead of
// taking the next flag as its value, and torchvision's validation preprocessing flags
// (--val-resize-size, --val-crop-size, --interpolation).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/decode.h"
#include "data/transforms.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using tandem::testing::app;
using tandem::testing::AppRun;
using tandem::testing::run_app_on;
using tandem::testing::slurp;

namespace {
// The "lr" of every step record of a --log-file.
std::vector<double> step_lrs(const std::string& path) {
  std::vector<double> out;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    if (j.value("event", "") == "step") out.push_back(j.at("lr").get<double>());
  }
  return out;
}
}  // namespace

TEST_CASE("--lr-min: cosine decays to it instead of 0") {
  const fs::path dir = tandem::testing::scratch_dir("tandem_lr_min");
  const std::string common = app("train_imagenet") + " --synthetic --device cpu --model small_cnn_nobn --image-size 16 "
                                                     "--synthetic-size 32 --synthetic-val-size 0 --batch-size 4 "
                                                     "--steps 8 --lr 0.1 --lr-scheduler cosine --log-every 1 ";
  const AppRun floor = run_app_on(0, common + "--lr-min 0.04 --log-file " + (dir / "floor.jsonl").string());
  INFO(floor.output);
  REQUIRE(floor.status == 0);
  const AppRun zero = run_app_on(0, common + "--log-file " + (dir / "zero.jsonl").string());
  REQUIRE(zero.status == 0);
  const std::vector<double> f = step_lrs((dir / "floor.jsonl").string()), z = step_lrs((dir / "zero.jsonl").string());
  REQUIRE(f.size() == 8);
  REQUIRE(z.size() == 8);
  for (double lr : f) CHECK(lr >= 0.04 - 1e-12);
  CHECK(z.back() < 0.04);  // without the floor the last steps go below it
  // lr = min + (base - min) x the same cosine factor, step by step.
  for (size_t k = 0; k < f.size(); ++k) CHECK(f[k] == doctest::Approx(0.04 + (0.1 - 0.04) * z[k] / 0.1));
  tandem::testing::check_refused(common + "--lr-min 0.2", "--lr-min 0.2 must be below --lr");
}

TEST_CASE("files below the class folders that are not decoded (.webp) are counted, with an example") {
  auto& data = tandem::testing::tiny_dataset("tandem_habits");
  fs::path cls;
  for (const auto& e : fs::directory_iterator(fs::path(data.data) / "train")) cls = e.path();
  std::ofstream(cls / "photo.webp") << "RIFF....WEBPVP8 ";
  std::ofstream(cls / "other.gif") << "GIF89a";
  const AppRun r = run_app_on(0, app("train_imagenet") + " --device cpu --model small_cnn_nobn --image-size 16 "
                                                         "--workers 1 --batch-size 4 --steps 1 --data " + data.data);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.has("warning: 2 file(s) below the class folders are not .jpg/.jpeg/.png/.bmp and are skipped"));
  CHECK((r.has("photo.webp") || r.has("other.gif")));
  fs::remove(cls / "photo.webp");
  fs::remove(cls / "other.gif");
}

TEST_CASE("--model-ema's help shows that it is off unless given") {
  const AppRun h = run_app_on(0, app("train_imagenet") + " --help");
  const size_t at = h.output.find("--model-ema ");
  REQUIRE(at != std::string::npos);
  const std::string line = h.output.substr(at, h.output.find('\n', at) - at);
  INFO(line);
  CHECK(line.find("off unless given") != std::string::npos);
  CHECK(line.find("=0.9998") == std::string::npos);
}

TEST_CASE("the run log has the documented checkpoint event, naming the file written") {
  const fs::path dir = tandem::testing::scratch_dir("tandem_ckpt_event") / "run";
  const AppRun r = run_app_on(0, app("train_imagenet") + " --synthetic --device cpu --model small_cnn_nobn "
                                                         "--image-size 16 --synthetic-size 16 --batch-size 4 --steps 4 "
                                                         "--checkpoint-every 2 --run-id ev --checkpoint-dir " +
                                     dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::vector<json> events;
  std::istringstream in(slurp(dir / "log_ev.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && json::parse(line).value("event", "") == "checkpoint") events.push_back(json::parse(line));
  REQUIRE(events.size() >= 2);  // step 2 inside the run, and the end
  for (const json& e : events) CHECK(e.at("step").get<int64_t>() > 0);
  CHECK(events.back().at("step") == 4);
  CHECK(fs::exists(events.back().at("path").get<std::string>()));  // older ones may be pruned (--keep-checkpoints)
}

TEST_CASE("a bare --amp is refused with what to write, and does not swallow the flag after it") {
  for (const char* program : {"train_imagenet", "train_encoder"}) {
    const AppRun bare = run_app_on(0, app(program) + " --synthetic --amp --zero 1 --dump-config");
    INFO(bare.output);
    CHECK(bare.status != 0);
    CHECK(bare.has("--amp: needs the 16-bit type: --amp bf16 or --amp fp16"));
    CHECK(!bare.has("--zero not in"));
    const AppRun given = run_app_on(0, app(program) + " --synthetic --amp bf16 --zero 1 --dump-config");
    INFO(given.output);
    REQUIRE(given.status == 0);
    CHECK(given.has("amp=\"bf16\""));
    CHECK(given.has("zero=1"));
  }
}

TEST_CASE("--val-resize-size and --val-crop-size: torchvision's validation preprocessing, named") {
  // The transform: resize_size R with crop C is what resize_ratio R/C gave.
  tandem::data::Image img;
  img.width = 40, img.height = 30;
  img.pixels.resize(40 * 30 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 37);
  tandem::data::TransformOptions by_size, by_ratio;
  by_size.size = by_ratio.size = 16;
  by_size.resize_size = 20;
  by_ratio.resize_ratio = 20.0 / 16.0;
  std::vector<float> a(16 * 16 * 3), b(16 * 16 * 3);
  tandem::data::val_transform(img, by_size, a.data());
  tandem::data::val_transform(img, by_ratio, b.data());
  CHECK(a == b);
  // Through the trainer: another crop for validation than for training.
  auto& data = tandem::testing::tiny_dataset("tandem_habits_val");
  const std::string common = app("train_imagenet") + " --device cpu --model small_cnn_nobn --image-size 16 "
                                                     "--workers 1 --batch-size 4 --steps 1 --data " + data.data;
  const AppRun r = run_app_on(0, common + " --val-resize-size 28 --val-crop-size 24 --interpolation bilinear");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.has("validation: top1"));
  tandem::testing::check_refused(common + " --val-resize-size 20 --val-crop-size 24", "--val-resize-size 20 is smaller");
  tandem::testing::check_refused(common + " --interpolation bicubic", "--interpolation");
}
