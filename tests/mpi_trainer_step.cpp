// tests/mpi_trainer_step.cpp: the training-step library's Step (apps/trainer/step/step.h) under mpiexec -n 2
// and -n 4, on the world's CPU communicator: the bodies of tests/support/step_cases.h (what each
// checks, and why, is written there), which tests/test_trainer_step.cpp runs at 1, 2 and 4 thread ranks.
#include <doctest/doctest.h>

#include <filesystem>

#include "dist/transport/bootstrap.h"
#include "tests/support/step_cases.h"

using namespace tandem;
using namespace tandem::testing::step_cases;

namespace {
dist::Communicator& world_cpu() { return dist::comm_for(Device::cpu()); }
const std::string kDir = (std::filesystem::temp_directory_path() / "tandem_mpi_trainer_step").string();
}  // namespace

TEST_CASE("the Step equals the trainers' hand-written loop bit for bit: DDP, ZeRO-1/2/3 x f32, bf16, fp16 x SGD, AdamW, LAMB x clipping") {
  dist::Communicator& c = world_cpu();
  check_equals_hand_written(c);
}

TEST_CASE("gradient accumulation: 2 micro-batches of b rows == one batch of 2b rows; only the last backward communicates") {
  dist::Communicator& c = world_cpu();
  check_accumulation(c);
}

TEST_CASE("the hand-run form (zero_grad, backward per micro-batch, update) equals run() and checks its calls") {
  dist::Communicator& c = world_cpu();
  check_hand_run_form(c);
}

TEST_CASE("state() under ZeRO-2 + bf16, restored through the Step into DDP + bf16, continues the run") {
  dist::Communicator& c = world_cpu();
  check_resume_zero2_to_ddp(c, kDir);
}

TEST_CASE("a NaN loss on one rank: skip drops the update on every rank, stop stops every rank") {
  dist::Communicator& c = world_cpu();
  check_nan_loss(c);
}

TEST_CASE("NaN gradients with finite losses: skip drops the update on every rank, stop stops every rank") {
  dist::Communicator& c = world_cpu();
  check_nan_gradients(c);
}

TEST_CASE("weights an update made non-finite stop the next step (skip too) and the run's end; no checkpoint of them") {
  dist::Communicator& c = world_cpu();
  check_nonfinite_weights(c);
}

TEST_CASE("fp16 gradients that overflow on one rank skip the update on every rank and halve every rank's loss scale") {
  dist::Communicator& c = world_cpu();
  check_amp_found_inf(c);
}

TEST_CASE("combinations that cannot work are refused when the Step is built, naming the option") {
  dist::Communicator& c = world_cpu();
  check_refusals(c);
}

TEST_CASE("the EMA the Step updates equals one updated by hand after each applied step; a skipped step leaves it") {
  dist::Communicator& c = world_cpu();
  check_ema(c);
}

TEST_CASE("TP 2 through the Step (DDP and ZeRO-1 over the DP groups, clipping) equals the canonical model under DDP (f64)") {
  dist::Communicator& c = world_cpu();
  check_tp(c, kDir);
}
