// tests/mpi_zero.cpp: ZeRO-1, 2 and 3 (dist/zero.h) against DDP, and checkpoints across stage, over
// MPI (a process a rank). The bodies and their tolerances are tests/support/zero_cases.h's, shared
// with tests/test_zero.cpp, which runs them with ranks as threads of one process.
#include <doctest/doctest.h>

#include <filesystem>

#include "dist/transport/bootstrap.h"
#include "tests/support/zero_cases.h"

using namespace tandem;
using namespace tandem::testing::zero_cases;

namespace {
dist::Communicator& mpi() { return dist::comm_for(Device::cpu()); }
}  // namespace

TEST_CASE("shard layout: every parameter element owned exactly once, chunks aligned") { check_shard_layout(); }

TEST_CASE("ZeRO-1 and ZeRO-2 with AdamW equal DDP with AdamW; ranks bit-identical; state equal") {
  check_adamw(mpi());
}

TEST_CASE("ZeRO with LAMB (norms across shards), SGD momentum, clipping and no_sync equals DDP") {
  check_lamb_sgd_clip_accumulate(mpi());
}

TEST_CASE("resume across stage and world size equals the uninterrupted run") {
  check_resume(mpi(), (std::filesystem::temp_directory_path() / "tandem_mpi_zero").string());
}

TEST_CASE("ZeRO-3 equals DDP: units by policy, prefetch 0/1/3, SGD, AdamW, LAMB, clipping, no_sync, unhooked units") {
  check_zero3(mpi());
}

TEST_CASE("ZeRO-3 schedule: parameters resident only while their unit computes, whole inside full_parameters") {
  check_zero3_schedule(mpi());
}
