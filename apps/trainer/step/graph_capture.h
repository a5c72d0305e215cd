// apps/trainer/step/graph_capture.h: StepOptions::cuda_graph - one training step captured once as a
// CUDA graph (core/cuda/graph.h) and replayed every step after.
// In full: apps/trainer/step/README.md ("graph_capture.h in detail").
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
