// tests/test_dist_failures.cpp: failures end the job quickly and say which rank is to blame.
// Runs tests/dist_fault_helper under mpiexec -n 2 (a child process, under `timeout` so that a hang
// fails this test instead of stalling CI) and checks exit status, elapsed time and output.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/app_runner.h"

using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {
AppRun run(const std::string& env, const std::string& mpiexec_flags, const std::string& mode) {
  return tandem::testing::run_app(env + " timeout -s KILL 120 " TANDEM_MPIEXEC " " + mpiexec_flags +
                                  " -n 2 " DIST_FAULT_HELPER " " + mode);
}
}  // namespace

TEST_CASE("a rank that builds a different model: every rank fails, naming the first difference") {
  // Both ranks report the same first difference (rank 1's fc.weight is [4, 5]).
  check_failed(run("", "", "mismatch"), 30,
               {"[rank 0] error", "[rank 1] error", "rank 1 built a different model", "fc.weight f32[4, 5]"},
               {"no error"});
}

TEST_CASE("a rank that dies mid-training: the launcher ends the job") {
  check_failed(run("TANDEM_COMM_TIMEOUT_S=20", "", "die"), 60, {"exiting on purpose"});
}

TEST_CASE("a rank that dies mid-training, launcher told not to clean up: tandem's watchdog names it") {
  // -disable-auto-cleanup keeps MPICH's launcher from killing the survivors, so only tandem's own
  // deadline (5 s here) can end the job.
  check_failed(run("TANDEM_COMM_TIMEOUT_S=5", "-disable-auto-cleanup", "die"), 60,
               {"[rank 0] tandem watchdog: rank(s) 1 did not reach collective"});
}

TEST_CASE("a rank missing from a collective on a sub-communicator: the watchdog names its world rank") {
  // The sub-communicator (Communicator::split, tensor parallelism's groups) numbers the two ranks in
  // reverse, so its rank 0 is world rank 1: the message must say 1, and that it was a sub-communicator.
  check_failed(run("TANDEM_COMM_TIMEOUT_S=5", "-disable-auto-cleanup", "subgroup"), 60,
               {"[rank 0] tandem watchdog: rank(s) 1 did not reach collective #1 (barrier world rank 1 never joins on "
                "a sub-communicator of 2 ranks)"},
               {"no error"});
}

// Leaving main without dist::finalize() must end the job at once, not hang in the communicators'
// teardown or leave rank 0 in its barrier: tandem prints a line and calls MPI_Abort. The launcher
// is told not to clean up and the collective deadline is 100 s, so only that path can end it in 30 s.
TEST_CASE("an exception that escapes main on one rank: the job ends at once, naming it") {
  check_failed(run("TANDEM_COMM_TIMEOUT_S=100", "-disable-auto-cleanup", "escape"), 30,
               {"[rank 1] tandem: uncaught error: ", "thrown out of main on purpose", "without dist::finalize()"},
               {"no error"});
}

TEST_CASE("a rank that returns from main without dist::finalize(): the job ends at once") {
  check_failed(run("TANDEM_COMM_TIMEOUT_S=100", "-disable-auto-cleanup", "return"), 30,
               {"[rank 1] tandem: the process is exiting without dist::finalize()"}, {"no error"});
}
