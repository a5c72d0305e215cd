// tests/mpi_gpu_graph_watchdog.cpp: replayed CUDA graphs under dist's watchdog
// (Communicator::watch_compute, dist/transport/comm_nccl.cpp).
//
// The experiment: a step with one NCCL all-reduce (and temporaries that die in it) runs eagerly
// twice, is captured, and is replayed three times; after each replay the rank hands the replay to
// the watchdog of a communicator made here with a short deadline (kTimeoutS). Then every rank
// waits for its GPU and sits past that deadline.
// Expected: each replay gets the next collective number on every rank (the two eager all-reduces
// are #1 and #2; the captured one is not counted, so the replays are #3, #4, #5); the replays sum
// the ranks' inputs, following the static input; and no rank is aborted: a replay whose event
// completed is retired, never reported. A watchdog that never retired it, or that queried an event
// recorded inside the capture, would kill the job here (MPI_Abort: the ctest entry fails).
// A hung replay is not drilled here (it ends the job by design); test_dist_failures drills hangs.
// Only NCCL can be captured: where the ranks share a GPU (host staging) the case says so and returns.
// Exits 77 on every rank without a GPU (tests/support/mpi_main.cpp). CUDA builds only.
#ifdef TANDEM_WITH_CUDA
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/context.h"
#include "core/cuda/graph.h"
#include "core/ops/elementwise/elementwise.h"
#include "dist/transport/bootstrap.h"
#include "dist/communicator.h"

namespace tandem::dist {
// dist/transport/comm_nccl.cpp; bootstrap.cpp declares it the same way (it is not part of the public API).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm world, Device gpu, double timeout_s);
}  // namespace tandem::dist

using namespace tandem;

namespace {
// Long enough for NCCL's first connection set-up on 4 ranks, short enough to sit out in a test.
constexpr double kTimeoutS = 5;
constexpr int64_t kN = 1024;
}  // namespace

TEST_CASE("replays handed to the watchdog get the next collective numbers and, once complete, are never reported") {
  const dist::World& w = dist::world();
  const bool nccl = std::string(dist::comm_for(w.device).backend()) == "nccl";
  if (!nccl) MESSAGE("the ranks share a GPU (host-staged MPI): no CUDA graph to watch");
  if (!nccl) return;
  auto comm = dist::make_nccl_communicator(MPI_COMM_WORLD, w.device, kTimeoutS);
  Tensor x = Tensor::full({kN}, w.rank + 1.0, DType::F32, w.device);
  Tensor out = Tensor::zeros({kN}, DType::F32, w.device);
  auto body = [&] {
    Tensor t = ops::scale(x, 2.0f);  // a temporary: allocated and freed inside the graph
    comm->all_reduce(t, dist::ReduceOp::Sum, "graph watchdog test")->wait();
    out.copy_(t);
  };
  body();  // collective #1 (NCCL's connections are set up here, outside the capture)
  body();  // #2
  const float n = static_cast<float>(w.size);
  CHECK(out.to_vector()[0] == n * (n + 1));  // 2 * (1 + ... + n)
  out.copy_(Tensor::zeros({kN}, DType::F32, w.device));

  cuda::StepGraph graph(w.device.index);
  graph.capture(body);
  std::vector<long long> seqs;
  for (int k = 0; k < 3; ++k) {
    if (k == 2) x.copy_(Tensor::full({kN}, 1.0, DType::F32, w.device));  // every rank: 1
    graph.replay();
    seqs.push_back(comm->watch_compute("replayed step " + std::to_string(k + 1)));
  }
  CHECK(seqs == std::vector<long long>{3, 4, 5});
  CHECK(out.to_vector()[kN - 1] == 2 * n);  // the last replay read the new input: 2 * (1 * n)

  cuda::synchronize();
  // Past the deadline: a completed replay left in the watchdog's list would abort the job now.
  std::this_thread::sleep_for(std::chrono::duration<double>(kTimeoutS + 1.5));
  MPI_Barrier(MPI_COMM_WORLD);  // every rank got here alive
  CHECK(out.to_vector()[0] == 2 * n);
}

#endif  // TANDEM_WITH_CUDA
