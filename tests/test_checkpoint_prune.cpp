// tests/test_checkpoint_prune.cpp: --keep-checkpoints keeps the newest N files by epoch number
// (numerically: epoch 10 is newer than epoch 9) and leaves other files alone.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "layers/checkpoint.h"

namespace fs = std::filesystem;

TEST_CASE("prune_checkpoints keeps the newest by epoch and nothing else is touched") {
  fs::path dir = fs::temp_directory_path() / ("tandem_prune_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int e : {1, 2, 9, 10, 11}) std::ofstream(tandem::checkpoint_path(dir.string(), e)) << "x";
  std::ofstream(dir / "notes.txt") << "keep me";
  CHECK(tandem::prune_checkpoints(dir.string(), 2) == 3);
  CHECK(fs::exists(tandem::checkpoint_path(dir.string(), 11)));
  CHECK(fs::exists(tandem::checkpoint_path(dir.string(), 10)));
  CHECK_FALSE(fs::exists(tandem::checkpoint_path(dir.string(), 9)));
  CHECK(fs::exists(dir / "notes.txt"));
  CHECK(tandem::latest_checkpoint(dir.string()) == tandem::checkpoint_path(dir.string(), 11));
  CHECK(tandem::prune_checkpoints(dir.string(), 0) == 0);  // 0 keeps everything
  fs::remove_all(dir);
}
