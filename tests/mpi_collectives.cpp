// tests/mpi_collectives.cpp: every collective on the CPU (MPI) path, against closed forms.
// Rank r contributes values that depend on r, so the expected result is a formula in the world
// size n: sum over ranks of (r + 1) * k = k * n (n + 1) / 2 (tests/support/collective_values.h).
// The bodies are shared with tests/mpi_gpu_collectives.cpp, which runs them on GPU tensors
// (tests/support/collective_checks.h); the last two cases are about the CPU world itself.
#include <doctest/doctest.h>

#include "dist/transport/bootstrap.h"
#include "tests/support/collective_checks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing;

namespace {
Communicator& mpi() { return comm_for(Device::cpu()); }
}  // namespace

TEST_CASE("all_reduce sum and avg: closed form, every dtype, odd sizes") { check_all_reduce(mpi(), Device::cpu()); }
TEST_CASE("all_reduce of a view reduces the view in place and leaves its neighbours alone") {
  check_all_reduce_view(mpi(), Device::cpu());
}
TEST_CASE("ordering: a write before the collective goes in, a write after wait() sees the result") {
  check_stream_handoff(mpi(), Device::cpu());
}
TEST_CASE("reduce_scatter: rank r gets chunk r of the sum") { check_reduce_scatter(mpi(), Device::cpu()); }
TEST_CASE("all_gather: chunk q is rank q's input") { check_all_gather(mpi(), Device::cpu()); }
TEST_CASE("broadcast from every root, and barrier") { check_broadcast_and_barrier(mpi(), Device::cpu()); }
TEST_CASE("wrong sizes are refused before anything is sent") { check_refusals(mpi(), Device::cpu()); }

TEST_CASE("all_gather_strings returns every rank's string in rank order") {
  std::string mine(static_cast<size_t>(world().rank * 3 + 1), static_cast<char>('a' + world().rank));
  std::vector<std::string> all = all_gather_strings(mine);
  REQUIRE(all.size() == static_cast<size_t>(world().size));
  for (int q = 0; q < world().size; ++q)
    CHECK(all[q] == std::string(static_cast<size_t>(q * 3 + 1), static_cast<char>('a' + q)));
}

TEST_CASE("world: local rank and device come from init") {
  const World& w = world();
  CHECK(w.rank == comm_for(Device::cpu()).rank());
  CHECK(w.size == comm_for(Device::cpu()).size());
  CHECK(w.local_rank >= 0);
  CHECK(w.local_rank < w.local_size);
  CHECK(error_rank() == w.rank);
}
