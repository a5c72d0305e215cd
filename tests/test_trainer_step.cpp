// tests/test_trainer_step.cpp: the training-step library's Step (apps/trainer/step/step.h) in one process,
// at 1, 2 and 4 ranks as threads (dist/transport/comm_thread.h): the bodies of
// tests/support/step_cases.h (what each checks, and why, is written there), which
// tests/mpi_trainer_step.cpp runs under mpiexec. Every part of the Step uses the communicators it is
// given (StepComms), so a thread group stands in for the world here.
#include <doctest/doctest.h>

#include <filesystem>

#include "tests/support/step_cases.h"
#include "tests/support/thread_ranks.h"

using namespace tandem;
using namespace tandem::testing::step_cases;
using tandem::testing::on_ranks;

namespace {
const std::string kDir = (std::filesystem::temp_directory_path() / "tandem_test_trainer_step").string();
}  // namespace

TEST_CASE("the Step equals the trainers' hand-written loop bit for bit: DDP, ZeRO-1/2/3 x f32, bf16, fp16 x SGD, AdamW, LAMB x clipping") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_equals_hand_written(c); });
}

TEST_CASE("gradient accumulation: 2 micro-batches of b rows == one batch of 2b rows; only the last backward communicates") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_accumulation(c); });
}

TEST_CASE("the hand-run form (zero_grad, backward per micro-batch, update) equals run() and checks its calls") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_hand_run_form(c); });
}

TEST_CASE("state() under ZeRO-2 + bf16, restored through the Step into DDP + bf16, continues the run") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_resume_zero2_to_ddp(c, kDir); });
}

TEST_CASE("a NaN loss on one rank: skip drops the update on every rank, stop stops every rank") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_nan_loss(c); });
}

TEST_CASE("NaN gradients with finite losses: skip drops the update on every rank, stop stops every rank") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_nan_gradients(c); });
}

TEST_CASE("weights an update made non-finite stop the next step (skip too) and the run's end; no checkpoint of them") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_nonfinite_weights(c); });
}

TEST_CASE("fp16 gradients that overflow on one rank skip the update on every rank and halve every rank's loss scale") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_amp_found_inf(c); });
}

TEST_CASE("combinations that cannot work are refused when the Step is built, naming the option") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_refusals(c); });
}

TEST_CASE("the EMA the Step updates equals one updated by hand after each applied step; a skipped step leaves it") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_ema(c); });
}

TEST_CASE("TP 2 through the Step (DDP and ZeRO-1 over the DP groups, clipping) equals the canonical model under DDP (f64)") {
  on_ranks({1, 2, 4}, [](dist::Communicator& c) { check_tp(c, kDir); });
}
