// tests/mpi_gpu_collectives.cpp: every collective on GPU tensors, against closed forms.
//
// The GPU twin of tests/mpi_collectives.cpp: the same bodies (tests/support/collective_checks.h)
// on world().device: NCCL when each rank has its own GPU (ctest's _np1 entry is NCCL with one
// rank), MPI through host memory when ranks share a GPU (bootstrap switches by itself) or
// TANDEM_HOST_STAGING=1 (the _np2_staged entry). Here the view case checks NCCL's offsets and the
// staging copy-back, and the hand-off case the events between the compute and comm streams.
// Exits 77 on every rank without a GPU (tests/support/mpi_main.cpp).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "dist/transport/bootstrap.h"
#include "tests/support/collective_checks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing;

namespace {
Device gpu() { return world().device; }
Communicator& comm() { return comm_for(gpu()); }

bool staging_forced() {
  const char* s = std::getenv("TANDEM_HOST_STAGING");
  return s && std::atoi(s) != 0;
}
}  // namespace

TEST_CASE("backend: NCCL when each rank has its own GPU, host-staged MPI when they share one") {
  const World& w = world();
  REQUIRE(w.device.is_cuda());
  const int gpus = cuda_device_count();
  CHECK(w.device.index == w.local_rank % gpus);
  const bool staged = staging_forced() || w.local_size > gpus;
  CHECK(w.options.host_staging == staged);
  CHECK(std::strcmp(comm().backend(), staged ? "mpi+host-staging" : "nccl") == 0);
  CHECK(comm().rank() == w.rank);
  CHECK(comm().size() == w.size);
  if (w.rank == 0) MESSAGE(w.size, " rank(s), ", gpus, " GPU(s) visible, backend ", std::string(comm().backend()));
}

TEST_CASE("all_reduce sum and avg on the GPU: closed form, every dtype, odd sizes") { check_all_reduce(comm(), gpu()); }
TEST_CASE("all_reduce of a view reduces the view in place and leaves its neighbours alone") {
  check_all_reduce_view(comm(), gpu());
}
TEST_CASE("stream hand-off: a kernel's output goes in, the next kernel sees the result") {
  check_stream_handoff(comm(), gpu());
}
TEST_CASE("reduce_scatter on the GPU: rank r gets chunk r of the sum") { check_reduce_scatter(comm(), gpu()); }
TEST_CASE("all_gather on the GPU: chunk q is rank q's input") { check_all_gather(comm(), gpu()); }
TEST_CASE("broadcast on the GPU from every root, and barrier") { check_broadcast_and_barrier(comm(), gpu()); }
TEST_CASE("wrong sizes and wrong devices are refused before anything is sent") { check_refusals(comm(), gpu()); }
