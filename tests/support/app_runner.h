// tests/support/app_runner.h: running the built programs (apps/*) from a test, as a user would.
//
// The tests that drive train_imagenet, train_encoder, the benchmarks or the failure drills all need
// the same few things: where the binaries are (TANDEM_TEST_BINARY_DIR, set by tests/CMakeLists.txt),
// a command's output and exit status, an mpiexec prefix with one BLAS/OpenMP thread per rank (the
// test machines have 2 cores), a scratch folder per test process, and a tiny image dataset from
// apps/make_dataset. One copy here keeps them alike: a fix to, say, how an exit status is decoded
// reaches every such test at once.
#pragma once
#include <filesystem>
#include <initializer_list>
#include <string>

namespace tandem::testing {

// The path of apps/<name> in the build tree (TANDEM_TEST_BINARY_DIR, else the current folder).
std::string app(const std::string& name);

// The whole file as a string; "" when it cannot be read.
std::string slurp(const std::filesystem::path& p);

// What a finished command printed and how it ended.
struct AppRun {
  int status = -1;      // exit status; 128 + the signal number when a signal ended it
  double seconds = 0;   // wall time
  std::string output;   // stdout and stderr, interleaved as printed
  bool has(const std::string& s) const { return output.find(s) != std::string::npos; }
};

// Runs `cmd` through /bin/sh with stderr folded into stdout and waits for it.
AppRun run_app(const std::string& cmd);

// `ranks` 0: `binary_and_args` alone (an MPI singleton); else under HYDRA_LAUNCHER=fork mpiexec -n ranks.
AppRun run_app_on(int ranks, const std::string& binary_and_args);

// "mpiexec <flags> -n <ranks> -env OPENBLAS_NUM_THREADS 1 -env OMP_NUM_THREADS 1 ": one thread per
// rank, so a multi-rank test does not oversubscribe the machine. The caller sets HYDRA_LAUNCHER.
std::string mpiexec(int ranks, const std::string& flags = "");

// The run failed (non-zero status) within limit_s seconds, its output holds every string of `says`
// and none of `never`. On failure the output is shown.
void check_failed(const AppRun& r, double limit_s, std::initializer_list<std::string> says,
                  std::initializer_list<std::string> never = {});
// The same with no time limit: for a failure whose speed is not what the test is about.
void check_failed(const AppRun& r, std::initializer_list<std::string> says, std::initializer_list<std::string> never = {});

// `cmd` (a program and its flags) exits non-zero and prints `text`: how a bad flag must be refused.
void check_refused(const std::string& cmd, const std::string& text);

// <temp>/<prefix>_<pid>, created: a scratch folder no other test process shares. Removed with all it
// holds when the process that made it exits normally (not a forked child's exit), unless
// TANDEM_KEEP_SCRATCH=1.
std::filesystem::path scratch_dir(const std::string& prefix);

// A scratch folder holding a tiny ImageNet-style dataset made by apps/make_dataset: 3 classes x 8
// train / 4 val JPEGs of 24-32 px (24 training images = 3 steps per epoch at batch 4 on 2 ranks).
// Removed with everything else in `root` when destroyed.
struct TinyImageDataset {
  std::filesystem::path root;
  std::string data;  // root/data, the --data argument
  explicit TinyImageDataset(const std::string& prefix);
  ~TinyImageDataset();
  TinyImageDataset(const TinyImageDataset&) = delete;
  TinyImageDataset& operator=(const TinyImageDataset&) = delete;
};

// The test process's TinyImageDataset under `prefix`, made at the first call (kept until exit).
TinyImageDataset& tiny_dataset(const std::string& prefix);

}  // namespace tandem::testing
