// tests/mpi_gpu_trainer_graph.cpp: the Step (apps/trainer/step/step.h) with StepOptions::cuda_graph -
// forward, backward with DDP's NCCL all-reduces, and the capturable update (AMP's device-side loss
// scaler and found-inf flag all-reduced over NCCL, the GradClipper, the optimizers' step(found_inf))
// captured once and replayed - against the same Step run eagerly in its capturable form.
//
// Expected: bitwise equality of the parameters, the checkpoint state (optimizer, f32 masters, loss
// scaler) and the loss scale, on every rank, for f32 + SGD, bf16 + AdamW + clipping and fp16 + LAMB
// + clipping, with overflow steps: a static [1] tensor the loss is multiplied by holds inf on two
// steps (written before the step, outside the graph), so the skip is decided on the device inside
// replays too. The eager run reports its skips in StepResult; the graphed one through
// skipped_unreported(), and the two counts must agree. Same kernels on the same addresses, cuDNN's
// deterministic engines, NCCL's all-reduce of the same bytes: any difference is a replay that froze
// a value (the LR, the scale, a step count) or missed a kernel.
// Like mpi_gpu_cuda_graph.cpp, only NCCL collectives can be captured: where the ranks share a GPU
// (host staging) the Step refuses cuda_graph, and the case says so and returns.
// Exits 77 on every rank without a GPU (tests/support/mpi_main.cpp). CUDA builds only.
#ifdef TANDEM_WITH_CUDA
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/trainer/step/step.h"
#include "core/ops/ops.h"
#include "dist/transport/bootstrap.h"
#include "layers/layers.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::testing::ddp_fixture;
using namespace tandem::trainer;

namespace {

constexpr int kRunSteps = 9;  // 3 eager, the capture, 5 replays (trainer::GraphCapture::kEagerSteps = 3)

struct Config {
  Precision precision;
  const char* optimizer;
  double clip;
};

struct Outcome {
  std::vector<std::string> params;  // host bytes, in order
  std::map<std::string, std::string> state;
  double loss_scale = 0;
  int64_t skipped = 0;
};

Outcome train(const Config& c, bool graphed, const Data& data) {
  const dist::World& w = dist::world();
  auto model = std::make_shared<LayersNet>(7);
  model->to(w.device);
  StepOptions o;
  o.precision = c.precision;
  o.optimizer = c.optimizer;
  o.optimizer_options.lr = 0.01;
  if (std::string(c.optimizer) == "sgd") o.optimizer_options.momentum = 0.9;
  o.clip_grad_norm = c.clip;
  o.first_bucket_mb = 256.0 / (1 << 20), o.bucket_mb = 1024.0 / (1 << 20);  // several captured all-reduces
  o.on_nonfinite = trainer::OnNonfinite::Off;
  o.backend.deterministic = true;  // the same cuDNN engines in both runs
  o.capturable = true;
  o.cuda_graph = graphed;
  Step step(model, StepComms(dist::comm_for(w.device), dist::comm_for(Device::cpu())), o);
  // Static inputs (graph_capture.h): the batch, and the loss multiplier (inf on overflow steps).
  const Tensor x = rank_rows(data.x, w.rank).clone(), y = rank_rows(data.y, w.rank).clone();
  Tensor poison = Tensor::ones({1}, DType::F32, w.device);
  Outcome out;
  for (int k = 0; k < kRunSteps; ++k) {
    const bool overflow = c.precision != Precision::F32 && (k == 1 || k == 6);  // one eager, one replayed
    poison.copy_(Tensor::from_vector({overflow && w.rank == 0 ? INFINITY : 1.0f}, {1}));
    step.set_lr(0.01 * (1.0 - 0.05 * k));  // the device-side LR must follow the schedule in replays
    const trainer::StepResult r = step.run([&](int) {
      return ops::mul(ops::cross_entropy(step.forward(x), y, 0.0f), poison);
    });
    if (!r.applied) ++out.skipped;
    CHECK(r.replayed == (graphed && k >= 3));
  }
  out.skipped += step.skipped_unreported();
  for (auto& [name, p] : model->named_parameters()) out.params.push_back(host_bytes(p));
  for (auto& [name, t] : step.state()) out.state[name] = host_bytes(t);
  out.loss_scale = step.loss_scale();
  CHECK(bit_identical(dist::comm_for(w.device), *model));
  return out;
}
}  // namespace

TEST_CASE("the Step's captured update (AMP scaler, found-inf all-reduce, clipping, any optimizer) equals its eager steps bitwise") {
  const dist::World& w = dist::world();
  if (!collectives_capturable(dist::comm_for(w.device))) return;
  const Data data = make_data(kBatch * w.size, w.device);
  for (const Config& c : {Config{Precision::F32, "sgd", 0}, Config{Precision::BF16, "adamw", 0.5},
                          Config{Precision::F16, "lamb", 0.5}}) {
    CAPTURE(trainer::precision_name(c.precision));
    CAPTURE(c.optimizer);
    const Outcome eager = train(c, false, data), graphed = train(c, true, data);
    CHECK(eager.params == graphed.params);
    CHECK(eager.state == graphed.state);
    CHECK(eager.loss_scale == graphed.loss_scale);
    CHECK(eager.skipped == graphed.skipped);
    if (c.precision != Precision::F32) CHECK(eager.skipped >= 2);  // the two poisoned steps at least
  }
}

#endif  // TANDEM_WITH_CUDA
