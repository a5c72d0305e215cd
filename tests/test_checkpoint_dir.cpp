// tests/test_checkpoint_dir.cpp: a checkpoint folder owned by its run (layers/checkpoint_dir.h) -
// names that do not collide, listing by metadata, the start-up checks (writability probe, dead
// temporaries), the fresh-start refusal, --resume auto's rule, and CheckpointDir doing it all.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "checkpoint_test_util.h"
#include "tests/support/error_text.h"
#include "core/safetensors.h"
#include "layers/checkpoint_dir.h"

namespace fs = std::filesystem;
using namespace tandem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...
using ckpt_test::state;
using ckpt_test::write;

namespace {

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

CheckpointDirOptions options(const std::string& dir, const std::string& resume = "") {
  CheckpointDirOptions o;
  o.dir = dir;
  o.resume = resume;
  o.program = "test";
  return o;
}
}  // namespace

TEST_CASE("epoch-end, mid-epoch and step names never collide") {
  // Before: a mid-epoch save inside epoch 1 was named checkpoint_epoch1, the end of epoch 0's name.
  const TrainState end = state("r", 4, 1);            // epoch 0 done
  const TrainState mid = state("r", 6, 1, 16);        // 2 steps into epoch 1
  CHECK(checkpoint_path_for("d", end, CheckpointNaming::epoch) == "d/checkpoint_epoch1.safetensors");
  CHECK(checkpoint_path_for("d", mid, CheckpointNaming::epoch) == "d/checkpoint_epoch1_step6.safetensors");
  TrainState per_rank = state("r", 6, 1);  // a caller that only counts per rank is mid-epoch too
  per_rank.index_in_epoch = 8;
  CHECK(checkpoint_path_for("d", per_rank, CheckpointNaming::epoch) == "d/checkpoint_epoch1_step6.safetensors");
  CHECK(checkpoint_path_for("d", mid, CheckpointNaming::step) == "d/checkpoint_step6.safetensors");
  for (const char* n : {"checkpoint_epoch1.safetensors", "checkpoint_epoch1_step6.safetensors",
                        "checkpoint_step6.safetensors"})
    CHECK(is_checkpoint_name(n));
  for (const char* n : {"checkpoint_epoch1.safetensors.tmp.h.12", "model.safetensors", "checkpoint_.safetensors",
                        ".lock"})
    CHECK_FALSE(is_checkpoint_name(n));
}

TEST_CASE("listing reads each file's metadata; unreadable files are listed as such, last") {
  ckpt_test::Scratch dir("list");
  write(checkpoint_path(dir.str(), 1), state("a", 3, 1));
  write(mid_epoch_checkpoint_path(dir.str(), 1, 5), state("b", 5, 1, 16));
  std::ofstream(dir.file("checkpoint_epoch9.safetensors")) << "garbage";
  std::ofstream(dir.file("other.safetensors")) << "not named like a checkpoint: not listed";
  const auto l = list_checkpoints(dir.str());
  REQUIRE(l.size() == 3);
  CHECK(l[0].path == mid_epoch_checkpoint_path(dir.str(), 1, 5));  // saved last: newest
  CHECK(l[0].state.run_id == "b");
  CHECK(l[0].state.samples == 40);
  CHECK(l[0].state.epoch_offset == 16);
  CHECK(l[1].state.run_id == "a");
  CHECK(l[1].state.step == 3);
  CHECK_FALSE(l[2].readable);
  CHECK(has(l[2].error, "checkpoint_epoch9.safetensors"));
  CHECK(list_checkpoints(dir.file("absent")).empty());
}

TEST_CASE("the writability probe fails at start-up with the path, the errno text and what to do") {
  ckpt_test::Scratch dir("probe");
  CHECK_FALSE(ensure_writable(dir.file("new/sub")));  // created, did not exist
  CHECK(ensure_writable(dir.file("new/sub")));
  CHECK(names_in(dir.file("new/sub")).empty());  // the probe file is gone

  // Under a regular file: fails for root too (root ignores permissions, not file types).
  std::ofstream(dir.file("file")) << "x";
  const std::string e = error_of([&] { ensure_writable(dir.file("file/ckpt")); });
  CHECK(has(e, "cannot create the checkpoint folder '" + dir.file("file/ckpt") + "'"));
  CHECK(has(e, "Not a directory"));
  CHECK(has(e, "nothing has been trained yet"));

  SUBCASE("a read-only folder") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: running as root, which writes into read-only folders");
      return;
    }
    fs::create_directories(dir.file("ro"));
    fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    const std::string ro = error_of([&] { ensure_writable(dir.file("ro")); });
    CHECK(has(ro, "is not writable"));
    CHECK(has(ro, "Permission denied"));
  }
}

TEST_CASE("start-up removes the temporaries of dead writers, and only those") {
  ckpt_test::Scratch dir("tmp");
  for (const char* n : {"checkpoint_epoch2.safetensors.tmp.node7.123",  // this version's writer
                        "checkpoint_step5.safetensors.tmp.456",         // tandem 0.1's
                        ".write_probe.tmp.node7.9",                     // an interrupted probe
                        "notes.txt.tmp.1",                              // someone else's
                        "checkpoint_epoch1.safetensors"})               // not a temporary
    std::ofstream(dir.file(n)) << "x";
  CHECK(safetensors::is_temp_name(fs::path(safetensors::temp_path("a/checkpoint_epoch3.safetensors")).filename()));
  const auto removed = remove_dead_temporaries(dir.str());
  CHECK(removed == std::vector<std::string>{".write_probe.tmp.node7.9", "checkpoint_epoch2.safetensors.tmp.node7.123",
                                            "checkpoint_step5.safetensors.tmp.456"});
  CHECK(names_in(dir.str()) == std::set<std::string>{"notes.txt.tmp.1", "checkpoint_epoch1.safetensors"});
}

TEST_CASE("a fresh start into a folder with another run's checkpoints is refused, naming files and runs") {
  ckpt_test::Scratch dir("fresh");
  CHECK(fresh_start_refusal(dir.str(), list_checkpoints(dir.str())).empty());
  write(checkpoint_path(dir.str(), 3), state("3f2a", 30, 3));
  const std::string r = fresh_start_refusal(dir.str(), list_checkpoints(dir.str()));
  CHECK(has(r, "checkpoint_epoch3.safetensors  run 3f2a  step 30"));
  CHECK(has(r, "--resume auto"));
  CHECK(has(r, "--overwrite-checkpoints"));
  CHECK(has(error_of([&] { CheckpointDir::open(options(dir.str())); }),
            "already holds 1 checkpoint file(s), another run's"));
}

TEST_CASE("--resume auto: one run, several runs without a record, a run id, nothing") {
  ckpt_test::Scratch dir("auto");
  const std::string d = dir.str();
  CHECK(choose_resume_auto(d, list_checkpoints(d), "", "").path.empty());
  write(checkpoint_path(d, 1), state("a", 1, 1));
  write(checkpoint_path(d, 2), state("a", 2, 2));
  ResumeChoice c = choose_resume_auto(d, list_checkpoints(d), "", "");
  CHECK(c.path == checkpoint_path(d, 2));
  CHECK(c.run_id == "a");

  write(checkpoint_path(d, 7), state("b", 7, 7));
  const std::string e = error_of([&] { choose_resume_auto(d, list_checkpoints(d), "", ""); });
  CHECK(has(e, "holds checkpoints of 2 runs"));
  CHECK(has(e, "checkpoint_epoch7.safetensors  run b"));
  CHECK(has(e, "checkpoint_epoch2.safetensors  run a"));
  CHECK(choose_resume_auto(d, list_checkpoints(d), "a", "").path == checkpoint_path(d, 2));  // rule 1
  CHECK(choose_resume_auto(d, list_checkpoints(d), "", "b").path == checkpoint_path(d, 7));  // rule 2
  c = choose_resume_auto(d, list_checkpoints(d), "", "c");  // the folder's run wrote nothing
  CHECK(c.path.empty());
  const std::string line = resume_auto_found_nothing(d, true, "c", list_checkpoints(d));
  CHECK(line ==
        "--resume auto: no checkpoint of run c in '" + d + "' (3 of other runs left alone): starting a new run");
  CHECK(resume_auto_found_nothing(d + "/typo", false, "", {}).find('\n') == std::string::npos);
  CHECK(has(resume_auto_found_nothing(d + "/typo", false, "", {}), "did not exist"));
}

TEST_CASE("CheckpointDir: fresh run, requeue with --resume auto, a second job refused, --overwrite-checkpoints") {
  ckpt_test::Scratch dir("cdir");
  const std::string d = dir.file("ckpt");  // does not exist yet
  ckpt_test::Tiny m;
  std::string run_a;
  {
    CheckpointDirOptions o = options(d, "auto");
    o.keep = 2;
    CheckpointDir a = CheckpointDir::open(o);
    REQUIRE(a.notes().size() == 1);
    CHECK(has(a.notes()[0], "did not exist"));
    CHECK(a.resume_path().empty());
    run_a = a.run_id();
    CHECK(run_a.size() == 32);
    // A second job on the same folder (flock is per open file, so this process counts as another job).
    const std::string e = error_of([&] { CheckpointDir::open(options(d, "auto")); });
    CHECK(has(e, "is in use by another job: pid " + std::to_string(::getpid())));
    CHECK(has(e, "run " + run_a));
    for (int e2 : {1, 2, 3}) CHECK(a.write(m, {}, state("", e2, e2)) == checkpoint_path(d, e2));
    CHECK(a.write(m, {}, state("", 5, 3, 16)) == mid_epoch_checkpoint_path(d, 3, 5));
    CHECK(list_checkpoints(d).size() == 2);  // keep = 2: the mid-epoch file and epoch 3
    CHECK(fs::exists(checkpoint_path(d, 3)));
    std::ofstream(safetensors::temp_path(checkpoint_path(d, 4))) << "half a file";  // a writer killed mid-write
  }
  {  // the requeued job
    CheckpointDir a2 = CheckpointDir::open(options(d, "auto"));
    CHECK(a2.run_id() == run_a);
    CHECK(a2.resume_path() == mid_epoch_checkpoint_path(d, 3, 5));
    REQUIRE(a2.notes().size() == 1);
    CHECK(has(a2.notes()[0], "removed 1 temporary file(s)"));
  }
  CHECK(has(error_of([&] { CheckpointDir::open(options(d)); }), "already holds 2 checkpoint file(s), another run's"));
  std::string run_b;
  {
    CheckpointDirOptions o = options(d);
    o.overwrite = true;
    o.keep = 1;
    CheckpointDir b = CheckpointDir::open(o);
    run_b = b.run_id();
    CHECK(run_b != run_a);
    CHECK(b.resume_path().empty());
    b.write(m, {}, state("", 1, 1));
    b.write(m, {}, state("", 2, 2));
    CHECK_FALSE(fs::exists(checkpoint_path(d, 1)));                  // b's own, pruned
    CHECK(fs::exists(checkpoint_path(d, 3)));                        // a's: untouched
    CHECK(fs::exists(mid_epoch_checkpoint_path(d, 3, 5)));
    CHECK(has(error_of([&] { b.write(m, {}, state(run_a, 9, 9)); }), "is open for run " + run_b));
  }
  {  // --resume auto follows the run that last used the folder, not the newest file of any run
    CheckpointDir b2 = CheckpointDir::open(options(d, "auto"));
    CHECK(b2.run_id() == run_b);
    CHECK(b2.resume_path() == checkpoint_path(d, 2));
  }
  {  // naming a run picks that run
    CheckpointDirOptions o = options(d, "auto");
    o.run_id = run_a;
    CheckpointDir a3 = CheckpointDir::open(o);
    CHECK(a3.resume_path() == mid_epoch_checkpoint_path(d, 3, 5));
  }
  {  // an explicit file: its run id is kept
    CheckpointDir x = CheckpointDir::open(options(d, checkpoint_path(d, 2)));
    CHECK(x.run_id() == run_b);
    CHECK(x.resume_path() == checkpoint_path(d, 2));
  }
  CHECK(has(error_of([&] { CheckpointDir::open(options(d, d + "/nope.safetensors")); }), "cannot read"));
  {  // a fresh start must not reuse an id that already has files here
    CheckpointDirOptions o = options(d);
    o.overwrite = true;
    o.run_id = run_a;
    CHECK(has(error_of([&] { CheckpointDir::open(o); }), "a fresh start must not reuse it"));
  }
}

TEST_CASE("CheckpointDir: a run that wrote nothing before it stopped is not replaced by the older run") {
  ckpt_test::Scratch dir("cdir_empty");
  const std::string d = dir.str();
  write(checkpoint_path(d, 7), state("old", 70, 7));
  std::string run_b;
  {
    CheckpointDirOptions o = options(d);
    o.overwrite = true;
    run_b = CheckpointDir::open(o).run_id();  // started, then stopped before its first checkpoint
  }
  CheckpointDir c = CheckpointDir::open(options(d, "auto"));
  CHECK(c.resume_path().empty());  // not old's checkpoint_epoch7: the user chose a new run
  REQUIRE(c.notes().size() == 1);
  CHECK(has(c.notes()[0], "no checkpoint of run " + run_b));
  CHECK(c.run_id() != run_b);
  CHECK(c.run_id() != "old");
}

TEST_CASE("CheckpointDir: a folder of format-1 files (no run ids, no lock record) resumes its newest") {
  ckpt_test::Scratch dir("cdir_v1");
  const std::string d = dir.str();
  for (int e : {1, 2}) write(checkpoint_path(d, e), state("", e, e));  // what tandem 0.1's apps leave
  CheckpointDir c = CheckpointDir::open(options(d, "auto"));
  CHECK(c.resume_path() == checkpoint_path(d, 2));
  CHECK(c.run_id().size() == 32);  // a named run from here on
}
