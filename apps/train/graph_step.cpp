// apps/train/graph_step.cpp: warm-up, capture and replay of train_imagenet's step (see graph_step.h).
#include "apps/train/graph_step.h"

#include <chrono>
#include <cstdio>

#include "apps/train/setup.h"  // defines: Training
#include "core/check.h"        // defines: TANDEM_CHECK
#include "core/graph_rng.h"    // defines: GraphRng
#include "core/ops/loss.h"     // defines: cross_entropy
#ifdef TANDEM_WITH_CUDA
#include "core/cuda/graph.h"   // defines: StepGraph
#else
namespace tandem::cuda {
class StepGraph {};  // a CPU-only build has no graphs: --cuda-graph is refused before one is made
}  // namespace tandem::cuda
#endif

namespace tandem::apps {

GraphStep::GraphStep(int warmup) : warmup_(warmup) {
  TANDEM_CHECK(warmup >= 2, "--cuda-graph needs at least 2 eager warm-up steps (SGD's momentum buffers are "
               "made by the first and its update changes form after it), got ", warmup);
}

GraphStep::~GraphStep() = default;

int64_t GraphStep::input_bytes() const { return data::batch_bytes(images_, labels_); }

// The same order as the eager loop (loop.cpp): forward, loss, DDP's zeroing, backward, update.
// Everything it allocates dies when it returns; its results go to the static loss_/logits_.
void GraphStep::run_body(Training& t, const TrainOptions& o) {
  Tensor logits = (*t.ddp)(images_);
  Tensor loss = ops::cross_entropy(logits, labels_, static_cast<float>(o.label_smoothing));
  t.ddp->reducer().zero_grad();
  loss.backward();
  t.opt->step();
  if (!loss_.defined()) {  // the first (eager) step: the static outputs get their shapes from it
    loss_ = loss.detach().clone();
    logits_ = logits.detach().clone();
  } else {
    loss_.copy_(loss.detach());
    logits_.copy_(logits.detach());
  }
}

void GraphStep::step(Training& t, const TrainOptions& o, const data::Batch& b) {
  if (!images_.defined()) {
    images_ = Tensor::empty_like(b.images);
    labels_ = Tensor::empty_like(b.labels);
  }
  TANDEM_CHECK(b.images.shape() == images_.shape() && b.labels.shape() == labels_.shape(),
               "--cuda-graph replays a step of fixed shape, but batch ", b.index, " has ", b.images.str(),
               " where the captured step took ", images_.str(), ": every batch must be full (the loader drops "
               "the last incomplete one by default)");
  images_.copy_(b.images);  // device to device, stream-ordered before the step's kernels
  labels_.copy_(b.labels);
  ++steps_;
  if (steps_ <= warmup_) {
    run_body(t, o);
    return;
  }
#ifdef TANDEM_WITH_CUDA
  if (!graph_) {
    const auto t0 = std::chrono::steady_clock::now();
    graph_ = std::make_unique<cuda::StepGraph>(t.dev.index);
    rng_ = std::make_unique<GraphRng>(t.dev.index);  // its slot table exists before the capture
    rng_->record([&] { graph_->capture([&] { run_body(t, o); }); });
    nodes_ = graph_->nodes();
    captured_at_ = steps_;
    capture_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  rng_->before_replay();  // the generators' state into the slots; host offsets step on
  graph_->replay();       // the captured step ran nothing: its first execution is this replay
#else
  TANDEM_THROW("--cuda-graph in a build without CUDA");
#endif
}

}  // namespace tandem::apps
