// tests/test_train_class_list.cpp: one class list for train_imagenet (issue 20, defect 5; the data set's
// side is tests/test_data.cpp's ImageFolder cases).
//
// train/'s folder names label both splits, are saved in every checkpoint, and a resume checks them:
//  - a val/ missing a class scores the same checkpoint as the full val/ does on the images it
//    holds: correct(full) = correct(val/ without class 0) + correct(val/ with class 0 only), exact
//    counts. Before, val/ built its own list, so without class 0 every later label shifted by one
//    (the issue: 45.6 % became 19.1 % for the same checkpoint);
//  - a resume whose train/ names the classes differently is refused (status 2) naming the
//    difference, where it used to train on with shifted labels;
//  - --evaluate labels val/ with the checkpoint's list, so a train/ that gained a class since does
//    not change the model it builds (it used to fail to load);
//  - a val/ class that train/ lacks is an error naming it; a hidden folder in train/ is no class.
// Under mpiexec -n 2 on the tiny dataset of apps/make_dataset (3 classes, 8 train / 4 val images each).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

tandem::testing::TinyImageDataset& scratch() { return tandem::testing::tiny_dataset("tandem_classes"); }

AppRun train(const std::string& args) {
  const AppRun r = tandem::testing::run_app("HYDRA_LAUNCHER=fork " + tandem::testing::mpiexec(2) +
                                            app("train_imagenet") +
                                            " --device cpu --model small_cnn --image-size 16 --batch 4 --workers 1 "
                                            "--lr 0.05 --log-every 3 " + args);
  return r;
}

const std::string kClass0 = "n0000_disc_solid";

// A copy of the tiny dataset under <root>/<name>, for editing.
fs::path copy_data(const std::string& name) {
  const fs::path d = scratch().root / name;
  fs::remove_all(d);
  fs::copy(scratch().data, d, fs::copy_options::recursive);
  return d;
}

// The checkpoint every case starts from: 4 epochs on the tiny dataset.
std::string checkpoint() {
  static const std::string path = [] {
    const std::string d = (scratch().root / "ck").string();
    const AppRun r = train("--data " + scratch().data + " --epochs 4 --checkpoint-dir " + d);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return d + "/checkpoint_epoch4.safetensors";
  }();
  return path;
}

struct Scores {
  int64_t correct = 0, images = 0;
  double loss_sum = 0;  // the mean cross-entropy x images
};

// --evaluate's correct count, image count and summed loss on `data`'s val/.
Scores evaluate(const fs::path& data) {
  const AppRun r = train("--data " + data.string() + " --evaluate --resume " + checkpoint());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const size_t at = r.output.find("val top1 ");
  REQUIRE(at != std::string::npos);
  const double top1 = std::stod(r.output.substr(at + 9));
  const size_t images = r.output.find(" images)", at);
  const size_t open = r.output.rfind('(', images);
  const int64_t n = std::stoll(r.output.substr(open + 1, images - open - 1));
  const double loss = std::stod(r.output.substr(r.output.find(" loss ", at) + 6));
  return {std::llround(top1 / 100 * static_cast<double>(n)), n, loss * static_cast<double>(n)};
}

}  // namespace

TEST_CASE("a val/ missing a class keeps train/'s labels: the same checkpoint scores the same images the same") {
  const Scores full = evaluate(scratch().data);
  const fs::path without = copy_data("val_without_0");
  fs::remove_all(without / "val" / kClass0);
  const fs::path only = copy_data("val_only_0");
  for (const auto& e : fs::directory_iterator(only / "val"))
    if (e.path().filename() != kClass0) fs::remove_all(e.path());
  const Scores rest = evaluate(without), zero = evaluate(only);
  MESSAGE("correct: ", full.correct, "/", full.images, " = ", rest.correct, "/", rest.images, " (without class 0) + ",
          zero.correct, "/", zero.images, "; summed loss ", full.loss_sum, " = ", rest.loss_sum, " + ", zero.loss_sum);
  CHECK(full.images == rest.images + zero.images);
  // With val/'s own list the images of classes 1 and 2 were scored as 0 and 1: the counts could
  // still add up by chance on this tiny model, the losses cannot (each printed to 4 decimals: the
  // three sums are off by at most (12 + 8 + 4) x 5e-5).
  CHECK(full.correct == rest.correct + zero.correct);
  CHECK(std::abs(full.loss_sum - (rest.loss_sum + zero.loss_sum)) < 2e-3);
}

TEST_CASE("a resume whose train/ names another class list is refused, naming the difference") {
  const fs::path renamed = copy_data("renamed");
  fs::rename(renamed / "train" / "n0001_square_solid", renamed / "train" / "n0001_box");
  fs::rename(renamed / "val" / "n0001_square_solid", renamed / "val" / "n0001_box");
  const AppRun r = train("--data " + renamed.string() + " --epochs 5 --resume " + checkpoint() + " --checkpoint-dir " +
                         (scratch().root / "renamed_ck").string());
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.has("label 1 is 'n0001_box' in train/ but 'n0001_square_solid' in the checkpoint"));
  CHECK_FALSE(r.has("step 13/"));
}

TEST_CASE("--evaluate labels val/ with the checkpoint's classes, whatever train/ holds now") {
  const Scores full = evaluate(scratch().data);
  const fs::path grown = copy_data("grown");
  fs::create_directories(grown / "train" / "n0003_new");
  fs::copy(grown / "train" / kClass0, grown / "train" / "n0003_new", fs::copy_options::recursive);
  const Scores same = evaluate(grown);  // a 3-class model, as the checkpoint's list says
  CHECK(same.correct == full.correct);
  CHECK(same.images == full.images);
  CHECK(same.loss_sum == doctest::Approx(full.loss_sum));
}

TEST_CASE("a val/ class that train/ lacks is an error naming it; a hidden folder in train/ is no class") {
  const fs::path stray = copy_data("stray");
  fs::create_directories(stray / "val" / "n0009_unknown");
  fs::copy(stray / "val" / kClass0, stray / "val" / "n0009_unknown", fs::copy_options::recursive);
  const AppRun bad = train("--data " + stray.string() + " --epochs 1");
  INFO(bad.output);
  CHECK(bad.status != 0);
  CHECK(bad.has("n0009_unknown"));
  CHECK_FALSE(bad.has("step 3/"));

  const fs::path hidden = copy_data("hidden");
  fs::create_directories(hidden / "train" / ".ipynb_checkpoints");
  fs::copy(hidden / "train" / kClass0, hidden / "train" / ".ipynb_checkpoints", fs::copy_options::recursive);
  const std::string metrics = (scratch().root / "hidden.json").string();
  const AppRun ok = train("--data " + hidden.string() + " --epochs 1 --metrics " + metrics);
  INFO(ok.output);
  REQUIRE(ok.status == 0);
  CHECK(nlohmann::json::parse(slurp(metrics))["num_classes"] == 3);
}
