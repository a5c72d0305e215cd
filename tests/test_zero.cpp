// tests/test_zero.cpp: the shard layout, and ZeRO-1/2/3 against DDP, in one process: 2 and 4 ranks as
// threads (dist/transport/comm_thread.h). The bodies and tolerances are tests/support/zero_cases.h's,
// which tests/mpi_zero.cpp runs over MPI.
#include <doctest/doctest.h>

#include <filesystem>

#include "dist/transport/comm_thread.h"
#include "tests/support/thread_ranks.h"
#include "tests/support/zero_cases.h"

using namespace tandem;
using namespace tandem::dist;
using tandem::testing::on_ranks;
using namespace tandem::testing::zero_cases;

TEST_CASE("shard layout: every parameter element owned exactly once, chunks aligned (world sizes 1 to 7)") {
  check_shard_layout();
}

TEST_CASE("ZeRO-1 and ZeRO-2 with AdamW equal DDP with AdamW; ranks bit-identical; state equal") {
  on_ranks({2, 4}, check_adamw);
}

TEST_CASE("ZeRO with LAMB (norms across shards), SGD momentum, clipping and no_sync equals DDP") {
  on_ranks({2, 4}, check_lamb_sgd_clip_accumulate);
}

TEST_CASE("resume across stage and world size equals the uninterrupted run") {
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem_test_zero").string();
  on_ranks({2, 4}, [&](Communicator& c) { check_resume(c, dir); });
}

TEST_CASE("ZeRO-3 equals DDP: units by policy, prefetch 0/1/3, SGD, AdamW, LAMB, clipping, no_sync, unhooked units") {
  on_ranks({2, 4}, check_zero3);
}

TEST_CASE("ZeRO-3 schedule: parameters resident only while their unit computes, whole inside full_parameters") {
  on_ranks({2, 4}, check_zero3_schedule);
}
