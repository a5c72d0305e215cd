// tests/test_scratch_dirs.cpp: a test's scratch folder (tests/support/app_runner.h) is removed when
// the test process exits, whichever of its cases ran. The app tests write checkpoints and safetensors
// there (0.7 GB for test_export_weights alone); left behind, a few CI runs fill the disk, which is how
// stop 36's CI run died ("No space left on device" while linking). A forked child's exit must not
// remove its parent's folder, and TANDEM_KEEP_SCRATCH=1 keeps them for a post-mortem.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem::testing;

namespace {

// This test binary run again with only the "probe" case, which prints its scratch folder.
std::string probe_path(const std::string& env) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const AppRun r = run_app(env + " TANDEM_SCRATCH_PROBE=1 " + self + " -tc=probe");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const size_t at = r.output.find("SCRATCH=");
  REQUIRE(at != std::string::npos);
  const size_t end = r.output.find('\n', at);
  return r.output.substr(at + 8, end - at - 8);
}

}  // namespace

TEST_CASE("probe") {
  if (!std::getenv("TANDEM_SCRATCH_PROBE")) return;  // only when started by the cases below
  const fs::path p = scratch_dir("tandem_scratch_probe");
  std::ofstream(p / "nested.bin") << "bytes";
  fs::create_directories(p / "sub");
  std::fflush(nullptr);
  // A forked child that exits normally runs the static destructors too: it must leave p alone.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) std::exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);
  CHECK(fs::exists(p / "nested.bin"));
  std::printf("SCRATCH=%s\n", p.c_str());
}

TEST_CASE("a scratch folder is gone once its test process exits") {
  const std::string p = probe_path("");
  CHECK_MESSAGE(!fs::exists(p), p, " was left behind");
}

TEST_CASE("TANDEM_KEEP_SCRATCH=1 keeps it") {
  const std::string p = probe_path("TANDEM_KEEP_SCRATCH=1");
  CHECK(fs::exists(fs::path(p) / "nested.bin"));
  fs::remove_all(p);
}
