// apps/trainer/step/graph_capture.h: StepOptions::cuda_graph - one training step captured once as a
// CUDA graph (core/cuda/graph.h) and replayed every step after.
//
// GraphCapture runs any step body: the first `warmup` calls eagerly, the next one under capture
// (which runs nothing) and then as the graph's first replay, every later call as a replay. The Step
// (step.h) hands it its own body - zero_grad, the trainer's forward-loss function, backward with
// the bucket all-reduces on the NCCL stream, the optimizer's update, and a copy of the loss into a
// static tensor the Step owns. A replay runs the captured kernels on the captured addresses, so
// everything the body reads or writes must stay where it was:
//   inputs:  the Step copies each batch into static tensors it owns (allocated from the first
//            batch) before the step, and hands those to the trainer's loss (Step::run's batch form);
//   outputs: the loss is copied into the Step's static loss tensor; what else the trainer reads
//            (the logits) it passes to Step::keep, which copies it into a static tensor too.
// The eager warm-up steps make everything the capture must find in place: cuDNN plans, cuBLASLt
// workspace, the optimizer's state and step counts, the chunk tables of AMP's unscale and copy back
// and of the GradClipper (the Step's capturable update, step.h). kEagerSteps: at least 2, so that a
// state buffer made by the first step is read by an eager one before the capture. Eager and replayed steps run the same kernels on the same addresses in the same
// order, so their results agree bitwise where the kernels are deterministic (BackendConfig::
// deterministic for cuDNN; NCCL's single-rank all-reduce is a copy).
// The LR keeps following the schedule: the trainer calls set_lr before every step, outside the
// graph, and SGD reads it from device memory (optim/cuda/sgd.cu).
// Random draws: dropout (VGG, AlexNet) takes its mask's counters from a device slot inside the
// graph, and a GraphRng (core/graph_rng.h) writes each generator's state there before every replay
// and advances the host generator by the step's draws, so replayed steps draw the masks the eager
// steps would have, and a checkpoint after N replays holds the generator state N eager steps leave.
// BatchNorm's num_batches_tracked is incremented on the device inside the graph, so it counts
// every replayed step (layers/norm.cpp).
// Host state the body changes (counters, timings) changes only in the eager and capturing calls:
// keep it outside. What cannot be captured is refused before training, in one place
// (step_options.cpp refusal / refusal_on). Left out: the DDP timeline has no per-bucket timing of
// replayed steps (the graph's events are not readable).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/device.h"  // defines: Device

namespace tandem {
class GraphRng;
}
namespace tandem::cuda {
class StepGraph;
}

namespace tandem::trainer {

class GraphCapture {
 public:
  static constexpr int kEagerSteps = 3;  // eager steps before the capture (>= 2, see above)
  explicit GraphCapture(Device device, int warmup = kEagerSteps);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  enum class Ran { Eager, Captured, Replayed };  // Captured: captured by this call, then replayed once
  // One step: `body` eagerly, or captured and replayed, or the graph replayed (body not called).
  Ran run(const std::function<void()>& body);

  bool captured() const { return captured_at_ > 0; }
  int64_t captured_at() const { return captured_at_; }  // the call (1-based) that captured (0: not yet)
  size_t nodes() const { return nodes_; }
  double capture_ms() const { return capture_ms_; }    // host time of the capture and instantiation
  int warmup() const { return warmup_; }

 private:
  Device device_;
  int warmup_;
  int64_t calls_ = 0;
  std::unique_ptr<cuda::StepGraph> graph_;
  std::unique_ptr<GraphRng> rng_;  // the captured step's random draws (dropout), replayed anew
  int64_t captured_at_ = 0;
  size_t nodes_ = 0;
  double capture_ms_ = 0;
};

}  // namespace tandem::trainer
