// tests/test_checkpoint_folder_apps.cpp: a --checkpoint-dir owned by one run, through
// train_imagenet under mpiexec -n 2 (issue 20, defects 1 and 6 and the folder's rough edges; the
// library's side is tests/test_checkpoint_dir.cpp and test_checkpoint_lock.cpp).
//
//  - Defect 1: a fresh run into a folder that holds an older run's higher-numbered checkpoints used
//    to train, print "checkpoint: ...epoch2" with status 0 and prune its own file (pruning kept the
//    highest epoch numbers), and --resume auto then continued the old run. Now the fresh start is
//    refused on every rank (status 2, in seconds, before any step) naming the files and what to
//    do; --overwrite-checkpoints starts the new run beside them, its files survive pruning, the old
//    ones stay untouched, and --resume auto follows the new run.
//  - Defect 6: a second job on a folder another job is training in is refused (status 2), naming
//    the first job's pid and program, instead of interleaving checkpoints with it.
//  - Rough edges: --resume auto with nothing to resume says so in one line; an unwritable folder
//    fails at start-up (status 2, no step taken), not after the first epoch; temporaries of dead
//    writers are removed at start-up, nothing else is.
// Each run is 24 synthetic samples (3 steps per epoch), so a case takes a few seconds.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/safetensors.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

fs::path root() { return tandem::testing::scratch_dir("tandem_ck_folder"); }  // one per test process

AppRun train(const std::string& args, const std::string& env = "") {
  return tandem::testing::run_app("HYDRA_LAUNCHER=fork " + env + " timeout -s KILL 120 " +
                                  tandem::testing::mpiexec(2) + app("train_imagenet") +
                                  " --device cpu --model small_cnn --synthetic --synthetic-size 24 "
                                  "--synthetic-val-size 8 --num-classes 4 --image-size 16 --batch 4 --workers 1 "
                                  "--lr 0.05 --log-every 1 " + args);
}

std::string run_of(const fs::path& file) { return tandem::safetensors::read_metadata(file.string()).at("run_id"); }

}  // namespace

TEST_CASE("defect 1: a fresh run into another run's folder is refused; --overwrite-checkpoints keeps both runs' files") {
  const fs::path d = root() / "d1";
  REQUIRE(train("--epochs 4 --keep-checkpoints 2 --checkpoint-dir " + d.string()).status == 0);
  REQUIRE(fs::exists(d / "checkpoint_epoch3.safetensors"));
  REQUIRE(fs::exists(d / "checkpoint_epoch4.safetensors"));
  const std::string old_run = run_of(d / "checkpoint_epoch4.safetensors");

  const AppRun refused = train("--epochs 2 --checkpoint-dir " + d.string());
  INFO(refused.output);
  CHECK(refused.status == 2);  // a usage error, on every rank
  CHECK(refused.seconds < 30);
  CHECK(refused.has("already holds 2 checkpoint file(s)"));
  CHECK(refused.has("checkpoint_epoch4.safetensors"));
  CHECK(refused.has("--overwrite-checkpoints"));
  CHECK_FALSE(refused.has("step 1/"));  // refused before any training
  CHECK_FALSE(fs::exists(d / "checkpoint_epoch1.safetensors"));

  const AppRun fresh = train("--epochs 2 --overwrite-checkpoints --checkpoint-dir " + d.string());
  REQUIRE(fresh.status == 0);
  // The new run's own files survive pruning (--keep-checkpoints 2 counts this run's files only) ...
  REQUIRE(fs::exists(d / "checkpoint_epoch2.safetensors"));
  const std::string new_run = run_of(d / "checkpoint_epoch2.safetensors");
  CHECK(new_run != old_run);
  // ... and the old run's are untouched.
  CHECK(run_of(d / "checkpoint_epoch4.safetensors") == old_run);
  CHECK(fs::exists(d / "checkpoint_epoch3.safetensors"));
  // --resume auto continues the run that last used the folder: the new one, not epoch 4 of the old.
  const AppRun resumed = train("--epochs 3 --resume auto --checkpoint-dir " + d.string());
  REQUIRE(resumed.status == 0);
  CHECK(resumed.has("resumed from " + (d / "checkpoint_epoch2.safetensors").string()));
  // Another run's file is never replaced (issue 29): the new run's epoch 3 gets a name of its own.
  CHECK(run_of(d / "checkpoint_epoch3.safetensors") == old_run);
  CHECK(run_of(d / ("checkpoint_epoch3.run-" + new_run + ".safetensors")) == new_run);
}

TEST_CASE("defect 6: a second job on a folder in use is refused, naming the first") {
  const fs::path d = root() / "d6";
  // The first job sleeps 1.5 s in each of its 6 steps (TANDEM_FAULT slow), holding the folder ~9 s.
  auto first = std::async(std::launch::async, [&] {
    return train("--epochs 2 --checkpoint-dir " + d.string(), "TANDEM_FAULT=0:1:slow:1500ms");
  });
  // Wait until it holds the lock: the record names its live pid.
  int64_t pid = 0;
  for (int i = 0; i < 300 && pid == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(d / ".lock");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && !j.value("released", true)) pid = j.value("pid", int64_t{0});
  }
  REQUIRE(pid > 0);
  const AppRun second = train("--epochs 2 --checkpoint-dir " + d.string());
  INFO(second.output);
  CHECK(second.status == 2);
  CHECK(second.has("pid " + std::to_string(pid)));
  CHECK(second.has("train_imagenet"));
  CHECK_FALSE(second.has("step 1/"));
  const AppRun done = first.get();
  INFO(done.output);
  CHECK(done.status == 0);
  CHECK(fs::exists(d / "checkpoint_epoch2.safetensors"));
}

TEST_CASE("--resume auto with nothing to resume says so; an unwritable folder fails at start-up; dead temporaries go") {
  const fs::path missing = root() / "typo";
  const AppRun nothing = train("--epochs 1 --resume auto --checkpoint-dir " + missing.string());
  REQUIRE(nothing.status == 0);
  CHECK(nothing.has("--resume auto: checkpoint folder '" + missing.string() + "' did not exist (created it), so there "
                    "is nothing to resume: starting a new run"));

  // A folder that cannot be created (its parent is a file): refused before the data or any step.
  const fs::path file = root() / "a_file";
  std::ofstream(file) << "not a folder";
  const AppRun bad = train("--epochs 1 --checkpoint-dir " + (file / "ck").string());
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK(bad.seconds < 30);
  CHECK(bad.has("cannot create the checkpoint folder"));
  CHECK_FALSE(bad.has("step 1/"));

  // A killed writer's temporary is removed at start-up; a file that is not tandem's is left alone.
  const fs::path d = root() / "tmp";
  fs::create_directories(d);
  std::ofstream(d / "checkpoint_epoch1.safetensors.tmp.deadhost.999999") << "half a file";
  std::ofstream(d / "notes.txt") << "mine";
  const AppRun clean = train("--epochs 1 --checkpoint-dir " + d.string());
  REQUIRE(clean.status == 0);
  CHECK(clean.has("removed 1 temporary file(s)"));
  CHECK_FALSE(fs::exists(d / "checkpoint_epoch1.safetensors.tmp.deadhost.999999"));
  CHECK(fs::exists(d / "notes.txt"));
  CHECK(fs::exists(d / "checkpoint_epoch1.safetensors"));
}

TEST_CASE("issue 29, item 1: --resume of run Y's file into run X's folder is refused; the override never replaces X's") {
  const fs::path x = root() / "i29_x", y = root() / "i29_y";
  REQUIRE(train("--epochs 3 --keep-checkpoints 0 --checkpoint-dir " + x.string()).status == 0);
  REQUIRE(train("--epochs 1 --checkpoint-dir " + y.string()).status == 0);
  const std::string run_x = run_of(x / "checkpoint_epoch3.safetensors");
  const std::string run_y = run_of(y / "checkpoint_epoch1.safetensors");
  const std::string y_file = (y / "checkpoint_epoch1.safetensors").string();
  const AppRun refused = train("--epochs 3 --checkpoint-dir " + x.string() + " --resume " + y_file);
  INFO(refused.output);
  CHECK(refused.status == 2);
  CHECK(refused.has("belongs to another run"));
  CHECK(refused.has("--overwrite-checkpoints"));
  CHECK_FALSE(refused.has("step 1/"));
  for (int e : {1, 2, 3}) CHECK(run_of(x / ("checkpoint_epoch" + std::to_string(e) + ".safetensors")) == run_x);

  const AppRun over = train("--epochs 3 --overwrite-checkpoints --checkpoint-dir " + x.string() + " --resume " + y_file);
  INFO(over.output);
  REQUIRE(over.status == 0);
  for (int e : {1, 2, 3}) CHECK(run_of(x / ("checkpoint_epoch" + std::to_string(e) + ".safetensors")) == run_x);
  CHECK(run_of(x / ("checkpoint_epoch3.run-" + run_y + ".safetensors")) == run_y);
}

TEST_CASE("issue 29, item 3: one exit-status table - CLI11's codes are usage errors (2), data errors 65, "
          "and the folder records how the run ended") {
  const fs::path d = root() / "i29_status";
  // CLI11 used to return 109 (an unknown flag) and 105 (a value its check refuses).
  for (const std::string& bad : {"--no-such-flag", "--epochs -1", "--bucket-mb 0", "--epochs"}) {
    const AppRun r = run_app(app("train_imagenet") + " --synthetic " + bad);
    INFO(bad, "\n", r.output);
    CHECK(r.status == 2);
  }
  const AppRun help = run_app(app("train_imagenet") + " --help");
  CHECK(help.status == 0);
  CHECK(help.has("Exit status: 0 completed; 1 failed at run time"));
  CHECK(help.has("65 data or input error"));
  CHECK(help.has("75 preempted"));
  // a data folder without train/: a data error (a --data path that does not exist is a usage error, 2)
  fs::create_directories(root() / "no_train");
  const AppRun nodata = run_app(app("train_imagenet") + " --device cpu --model small_cnn --data " +
                                (root() / "no_train").string() + " --epochs 1 --checkpoint-dir " + d.string());
  INFO(nodata.output);
  CHECK(nodata.status == 65);
  json st = json::parse(slurp((d / "run_status.json").string()));
  CHECK(st["state"] == "data");
  CHECK(st["exit_status"] == 65);
  CHECK(st["retry"] == false);
  // a completed run
  REQUIRE(train("--epochs 1 --overwrite-checkpoints --checkpoint-dir " + d.string()).status == 0);
  st = json::parse(slurp((d / "run_status.json").string()));
  CHECK(st["state"] == "completed");
  CHECK(st["exit_status"] == 0);
  CHECK(st["last_checkpoint"] == (d / "checkpoint_epoch1.safetensors").string());
}

TEST_CASE("issue 29, item 5: another --optimizer on resume names both; a one-class data folder is refused") {
  const fs::path d = root() / "i29_opt";
  REQUIRE(train("--epochs 1 --checkpoint-dir " + d.string()).status == 0);
  const AppRun other = train("--epochs 2 --optimizer adamw --resume auto --checkpoint-dir " + d.string());
  INFO(other.output);
  CHECK(other.status == 2);
  CHECK(other.has("was trained with --optimizer sgd but this run asks for --optimizer adamw"));

  const fs::path data = root() / "i29_one_class";
  REQUIRE(run_app(app("make_dataset") + " --out " + data.string() + " --classes 2 --train-per-class 4 "
                  "--val-per-class 1 --min-size 16 --max-size 16 --threads 1").status == 0);
  fs::path first;
  for (const auto& e : fs::directory_iterator(data / "train")) first = e.path();
  fs::remove_all(first);
  const AppRun one = run_app(app("train_imagenet") + " --device cpu --model small_cnn --image-size 16 --batch 2 "
                             "--epochs 1 --data " + data.string());
  INFO(one.output);
  CHECK(one.status == 65);
  CHECK(one.has("holds 1 class folder"));
}
