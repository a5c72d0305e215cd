// apps/trainer/step/graph_capture.cpp: warm-up, capture and replay of a step body (see graph_capture.h).
#include "apps/trainer/step/graph_capture.h"

#include <chrono>

#include "core/check.h"      // defines: TANDEM_CHECK
#include "core/graph_rng.h"  // defines: GraphRng
#ifdef TANDEM_WITH_CUDA
#include "core/cuda/graph.h"  // defines: StepGraph
#else
namespace tandem::cuda {
class StepGraph {};  // a CPU-only build has no graphs: cuda_graph is refused before one is made
}  // namespace tandem::cuda
#endif

namespace tandem::trainer {

GraphCapture::GraphCapture(Device device, int warmup) : device_(device), warmup_(warmup) {
  TANDEM_CHECK(warmup >= 2, "CUDA graph capture needs at least 2 eager warm-up steps (SGD's momentum buffers are "
               "made by the first and its update changes form after it), got ", warmup);
}

GraphCapture::~GraphCapture() = default;

GraphCapture::Ran GraphCapture::run(const std::function<void()>& body) {
  ++calls_;
  if (calls_ <= warmup_) {
    body();
    return Ran::Eager;
  }
#ifdef TANDEM_WITH_CUDA
  Ran ran = Ran::Replayed;
  if (!graph_) {
    const auto t0 = std::chrono::steady_clock::now();
    graph_ = std::make_unique<cuda::StepGraph>(device_.index);
    rng_ = std::make_unique<GraphRng>(device_.index);  // its slot table exists before the capture
    rng_->record([&] { graph_->capture(body); });
    nodes_ = graph_->nodes();
    captured_at_ = calls_;
    capture_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ran = Ran::Captured;
  }
  rng_->before_replay();  // the generators' state into the slots; host offsets step on
  graph_->replay();       // the captured step ran nothing: its first execution is this replay
  return ran;
#else
  TANDEM_THROW("CUDA graph capture in a build without CUDA (StepOptions::cuda_graph is refused on the CPU)");
#endif
}

}  // namespace tandem::trainer
