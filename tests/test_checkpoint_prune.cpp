// tests/test_checkpoint_prune.cpp: --keep-checkpoints keeps the newest N files of the writing run,
// never another run's, never an unreadable file, never the file just written; and the newest file
// of a run is the most recently saved one.
//
// Issue 20, defect 1, was shown failing on the code before this change: a folder holding an older
// run's checkpoint_epoch5..7 and the new run's just-written checkpoint_epoch3; the old
// prune_checkpoints(dir, 2) (newest by epoch number, any run) deleted checkpoint_epoch3 and the old
// latest_checkpoint(dir) returned the old run's checkpoint_epoch7 (2 of 2 checks failed).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint_test_util.h"
#include "checkpoint/checkpoint_dir.h"

namespace fs = std::filesystem;
using namespace tandem;
using ckpt_test::state;
using ckpt_test::write;

TEST_CASE("issue 20.1: a fresh run next to an older run's higher-numbered files keeps its own, prunes only its own") {
  ckpt_test::Scratch dir("prune_i20");
  const std::string d = dir.str();
  for (int e : {5, 6, 7}) write(checkpoint_path(d, e), state("oldrun", 100 * e, e));
  for (int e : {1, 2, 3}) {
    const std::string p = checkpoint_path(d, e);
    write(p, state("newrun", 10 * e, e));
    prune_checkpoints(d, 2, "newrun", p);
  }
  CHECK(fs::exists(checkpoint_path(d, 3)));   // just written
  CHECK(fs::exists(checkpoint_path(d, 2)));   // the second of keep = 2
  CHECK_FALSE(fs::exists(checkpoint_path(d, 1)));
  for (int e : {5, 6, 7}) CHECK(fs::exists(checkpoint_path(d, e)));  // another run's: never pruned
  CHECK(latest_checkpoint(d, "newrun") == checkpoint_path(d, 3));
  CHECK(latest_checkpoint(d, "oldrun") == checkpoint_path(d, 7));
  CHECK(latest_checkpoint(d, "nosuchrun").empty());
}

TEST_CASE("pruning keeps by save time within a run, counts epoch 10 after epoch 9, and leaves other files alone") {
  ckpt_test::Scratch dir("prune");
  const std::string d = dir.str();
  for (int e : {1, 2, 9, 10, 11}) write(checkpoint_path(d, e), state("r", e, e));
  std::ofstream(dir.file("notes.txt")) << "keep me";
  std::ofstream(dir.file("checkpoint_epoch0.safetensors")) << "not a checkpoint";  // unreadable: never removed
  CHECK(prune_checkpoints(d, 0, "r", checkpoint_path(d, 11)) == 0);  // 0 keeps everything
  CHECK(prune_checkpoints(d, 2, "r", checkpoint_path(d, 11)) == 3);
  CHECK(fs::exists(checkpoint_path(d, 11)));
  CHECK(fs::exists(checkpoint_path(d, 10)));
  CHECK_FALSE(fs::exists(checkpoint_path(d, 9)));
  CHECK(fs::exists(dir.file("notes.txt")));
  CHECK(fs::exists(dir.file("checkpoint_epoch0.safetensors")));
  CHECK(latest_checkpoint(d, "r") == checkpoint_path(d, 11));
}

TEST_CASE("a run resumed from an earlier checkpoint of its own: the file just written is newest and never pruned") {
  ckpt_test::Scratch dir("prune_branch");
  const std::string d = dir.str();
  for (int e : {1, 2, 3, 4}) write(checkpoint_path(d, e), state("r", 10 * e, e));
  // Resumed from epoch 2 (say, after a divergence): epoch 3 is written again, with fewer steps than epoch 4.
  write(checkpoint_path(d, 3), state("r", 30, 3));
  CHECK(latest_checkpoint(d, "r") == checkpoint_path(d, 3));  // not epoch 4, of the abandoned line
  CHECK(prune_checkpoints(d, 1, "r", checkpoint_path(d, 3)) == 3);
  CHECK(fs::exists(checkpoint_path(d, 3)));
  CHECK_FALSE(fs::exists(checkpoint_path(d, 4)));
}

TEST_CASE("files of the run without an id (format 1, or callers that set none) are a run of their own") {
  ckpt_test::Scratch dir("prune_noid");
  const std::string d = dir.str();
  for (int e : {1, 2, 3}) write(checkpoint_path(d, e), state("", e, e));
  write(checkpoint_path(d, 4), state("named", 4, 4));
  CHECK(prune_checkpoints(d, 1, "", checkpoint_path(d, 3)) == 2);
  CHECK(fs::exists(checkpoint_path(d, 3)));
  CHECK(fs::exists(checkpoint_path(d, 4)));
  CHECK(latest_checkpoint(d, "") == checkpoint_path(d, 3));
}
