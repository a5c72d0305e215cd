// apps/train/graph_step.h: train_imagenet --cuda-graph - one training step captured once as a CUDA
// graph (core/cuda/graph.h) and replayed every step after.
//
// The step (forward through DDP, cross-entropy, DDP's gradient zeroing, backward with the bucket
// all-reduces on the NCCL stream, the fused SGD update) always runs on the same static tensors:
//   inputs:  each batch is copied into `images`/`labels` (allocated from the first batch) before
//            the step runs, so the captured kernels read the new batch at the captured addresses;
//   outputs: the loss and logits are copied into `loss`/`logits`, which the loop reads after it.
// Steps 1..warmup run eagerly on those tensors (cuDNN plans, cuBLASLt workspace, SGD's momentum
// buffers and chunk table are all made then); the next step is captured and replayed at once, and
// every later step is a replay. Eager and replayed steps run the same kernels on the same addresses
// in the same order, so their results agree bitwise where the kernels are deterministic
// (--deterministic for cuDNN; NCCL's single-rank all-reduce is a copy).
// The LR keeps following the schedule: the loop calls set_lr before every step, outside the graph,
// and SGD reads it from device memory (optim/cuda/sgd.cu).
// Random draws: dropout (VGG, AlexNet) takes its mask's counters from a device slot inside the
// graph, and a GraphRng (core/graph_rng.h) writes each generator's state there before every replay
// and advances the host generator by the step's draws, so replayed steps draw the masks the eager
// steps would have, and a checkpoint after N replays holds the generator state N eager steps leave.
// BatchNorm's num_batches_tracked is incremented on the device inside the graph, so it counts
// every replayed step (layers/norm.cpp).
// What cannot be captured is refused before training (options.cpp validate, setup.cpp
// check_cuda_graph): the CPU, MPI and host-staged collectives, --on-nonfinite stop/skip, --amp,
// --zero, --clip-grad-norm, --strategy ps, AdamW/LAMB (their bias corrections are host values
// passed as kernel arguments), TANDEM_FAULT and TANDEM_SYNC_CHECK. Left out: the DDP timeline has
// no per-bucket timing of replayed steps (the graph's events are not readable).
#pragma once
#include <cstdint>
#include <memory>

#include "apps/train/options.h"  // defines: TrainOptions
#include "core/tensor.h"         // defines: Tensor
#include "data/loader.h"         // defines: Batch, batch_bytes

namespace tandem {
class GraphRng;
}
namespace tandem::cuda {
class StepGraph;
}

namespace tandem::apps {

struct Training;

class GraphStep {
 public:
  static constexpr int kEagerSteps = 3;  // eager steps before the capture (SGD's momentum needs >= 2)
  explicit GraphStep(int warmup = kEagerSteps);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // One training step on batch `b` (the LR already set): eager, captured-and-replayed, or replayed.
  // Afterwards loss() and logits() hold its results (device tensors, valid until the next step).
  void step(Training& t, const TrainOptions& o, const data::Batch& b);
  const Tensor& loss() const { return loss_; }
  const Tensor& logits() const { return logits_; }
  // Bytes of the static input tensors (a copy of one batch, 0 before the first step): data, not
  // model state, for the memory ledger (apps/train/memory.cpp) as the loader's batches are.
  int64_t input_bytes() const;

  bool captured() const { return captured_at_ > 0; }
  int64_t captured_at() const { return captured_at_; }  // the 1-based step that was captured (0: not yet)
  size_t nodes() const { return nodes_; }
  double capture_ms() const { return capture_ms_; }    // host time of the capture and instantiation
  int warmup() const { return warmup_; }

 private:
  void run_body(Training& t, const TrainOptions& o);  // the step itself, on the static tensors
  int warmup_;
  int64_t steps_ = 0;
  Tensor images_, labels_, loss_, logits_;
  std::unique_ptr<cuda::StepGraph> graph_;
  std::unique_ptr<GraphRng> rng_;  // the captured step's random draws (dropout), replayed anew
  int64_t captured_at_ = 0;
  size_t nodes_ = 0;
  double capture_ms_ = 0;
};

}  // namespace tandem::apps
