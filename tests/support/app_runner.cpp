// tests/support/app_runner.cpp: see app_runner.h.
#include "tests/support/app_runner.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace tandem::testing {

std::string app(const std::string& name) {
  const char* d = std::getenv("TANDEM_TEST_BINARY_DIR");
  return std::string(d ? d : ".") + "/apps/" + name;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

AppRun run_app(const std::string& cmd) {
  AppRun r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE_MESSAGE(f != nullptr, "could not start: ", cmd);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) r.output.append(buf, n);
  const int st = pclose(f);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

AppRun run_app_on(int ranks, const std::string& binary_and_args) {
  return run_app(ranks == 0 ? binary_and_args : "HYDRA_LAUNCHER=fork " + mpiexec(ranks) + binary_and_args);
}

std::string mpiexec(int ranks, const std::string& flags) {
  return "mpiexec " + flags + " -n " + std::to_string(ranks) + " -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 ";
}

void check_failed(const AppRun& r, double limit_s, std::initializer_list<std::string> says,
                  std::initializer_list<std::string> never) {
  INFO(r.output);
  CHECK(r.seconds < limit_s);
  check_failed(r, says, never);
}

void check_failed(const AppRun& r, std::initializer_list<std::string> says, std::initializer_list<std::string> never) {
  INFO(r.output);
  CHECK(r.status != 0);
  for (const std::string& s : says) CHECK(r.has(s));
  for (const std::string& s : never) CHECK(!r.has(s));
}

void check_refused(const std::string& cmd, const std::string& text) {
  const AppRun r = run_app(cmd);
  INFO(cmd, " -> ", r.output);
  CHECK(r.status != 0);
  CHECK(r.has(text));
}

namespace {

// The scratch folders this process made, removed when it exits (static destruction). Only by the
// process that made them: a forked child that calls exit() runs the same destructors. The tests write
// checkpoints and weights there (0.7 GB in test_export_weights), so a folder left behind per run fills
// a CI disk in a few runs. TANDEM_KEEP_SCRATCH=1 keeps them to look at after a failure.
struct ScratchFolders {
  pid_t owner = ::getpid();
  std::set<fs::path> made;
  ~ScratchFolders() {
    if (::getpid() != owner) return;
    if (const char* keep = std::getenv("TANDEM_KEEP_SCRATCH"); keep && std::string(keep) == "1") return;
    for (const fs::path& p : made) {
      std::error_code ec;  // best effort: a folder a case already removed is no error
      fs::remove_all(p, ec);
    }
  }
};

}  // namespace

fs::path scratch_dir(const std::string& prefix) {
  static ScratchFolders folders;
  const fs::path p = fs::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  folders.made.insert(p);
  return p;
}

TinyImageDataset::TinyImageDataset(const std::string& prefix) : root(scratch_dir(prefix)), data((root / "data").string()) {
  const AppRun r = run_app(app("make_dataset") + " --out " + data +
                           " --classes 3 --train-per-class 8 --val-per-class 4 --min-size 24 --max-size 32 --threads 1");
  REQUIRE_MESSAGE(r.status == 0, "make_dataset failed:\n", r.output);
}

TinyImageDataset::~TinyImageDataset() { fs::remove_all(root); }

TinyImageDataset& tiny_dataset(const std::string& prefix) {
  static std::map<std::string, std::unique_ptr<TinyImageDataset>> made;  // destroyed at exit: removed
  std::unique_ptr<TinyImageDataset>& d = made[prefix];
  if (!d) d = std::make_unique<TinyImageDataset>(prefix);
  return *d;
}

}  // namespace tandem::testing
