// tests/mpi_gpu_cuda_graph.cpp: a DDP training step (forward, backward with the reducer's bucketed
// NCCL all-reduces on the comm stream, SGD) captured as a CUDA graph and replayed, against the same
// steps run eagerly.
//
// Only NCCL collectives can be captured (core/cuda/graph.h): the _np1 entry (NCCL with one rank)
// and _np2/_np4 on a machine with a GPU per rank run the experiment; where the ranks share a GPU
// (host-staged MPI, or _np2_staged) there is nothing to capture and the case says so and returns
// (train_imagenet refuses --cuda-graph there, tested by test_train_cli).
// Expected: bitwise equality with the eager steps, on every rank. The steps are the same kernels on
// the same addresses, and NCCL's all-reduce of the same bytes gives the same bytes; cuDNN runs
// deterministic engines only. A bucket missing from the graph, a reducer that reads stale host
// state or a frozen LR each change the parameters by the size of an update.
// Exits 77 on every rank without a GPU (tests/support/mpi_main.cpp).
// StepGraph exists only in CUDA builds: a CPU-only build compiles no case here (and, having no
// GPU, exits 77 before doctest runs).
#ifdef TANDEM_WITH_CUDA
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/graph.h"
#include "core/ops/conv/conv.h"
#include "core/ops/loss/loss.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "optim/optimizer.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::testing::ddp_fixture;

namespace {
constexpr int kGraphSteps = 7;
constexpr int kWarmup = 3;

// The replica's parameters after kGraphSteps steps on this rank's rows, eager or graphed.
std::vector<std::vector<float>> train(bool graphed, const Data& data) {
  const dist::World& w = dist::world();
  auto model = std::make_shared<SmallCnn>(7);
  model->to(w.device);
  dist::DdpOptions dopt;
  dopt.reducer.bucketing.first_bucket_bytes = 256;  // several buckets, so several captured all-reduces
  dopt.reducer.bucketing.bucket_bytes = 1024;
  dist::DistributedDataParallel ddp(model, dist::comm_for(w.device), dopt);
  optim::OptimizerOptions oo;
  oo.lr = kLr, oo.momentum = 0.9;
  auto opt = optim::make_optimizer("sgd", model->named_parameters(), oo);
  const Tensor x = rank_rows(data.x, w.rank).clone(), y = rank_rows(data.y, w.rank).clone();
  auto body = [&] {
    Tensor loss = ops::cross_entropy(ddp(x), y, 0.0f);
    ddp.reducer().zero_grad();
    loss.backward();
    opt->step();
  };
  cuda::StepGraph graph(w.device.index);
  for (int k = 0; k < kGraphSteps; ++k) {
    opt->set_lr(kLr * (1.0 - 0.1 * k));
    if (!graphed || k < kWarmup) {
      body();
    } else {
      if (!graph.captured()) graph.capture(body);
      graph.replay();
    }
  }
  std::vector<std::vector<float>> out;
  for (auto& [name, p] : model->named_parameters()) out.push_back(p.to_vector());
  CHECK(bit_identical(dist::comm_for(w.device), *model));
  return out;
}
}  // namespace

TEST_CASE("a captured DDP step (NCCL all-reduces inside the graph) equals the eager steps bitwise") {
  const dist::World& w = dist::world();
  if (!collectives_capturable(dist::comm_for(w.device))) return;
  BackendConfig deterministic = tandem::backend();
  deterministic.deterministic = true;
  BackendScope scope(deterministic);  // the same cuDNN engines in both runs
  const Data data = make_data(kBatch * w.size, w.device);
  const auto eager = train(false, data), graphed = train(true, data);
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("parameter #", i);
    CHECK(eager[i] == graphed[i]);
  }
}

#endif  // TANDEM_WITH_CUDA
