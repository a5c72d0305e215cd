// core/cuda/graph.h: capture a step's GPU work once as a CUDA graph, then replay it (CUDA builds only).
//
// Why: a training step of a small or medium network is thousands of kernel launches, each costing
// the host a few microseconds; replaying a graph is one launch (the PyTorch/MLPerf technique).
//
// Contract (what the captured callable must keep - StepGraph checks what it can and fails naming it):
//   - it was run eagerly first (warm-up), so every lazy initialisation (cuDNN plans, cuBLAS handles,
//     optimizer state, the SGD chunk table) happened outside the capture;
//   - it enqueues work only on the device's compute stream, or on side streams forked from it and
//     joined back through events (dist's NCCL stream: cudaEventRecord + cudaStreamWaitEvent);
//   - it never waits on the host (.item(), to_vector, cudaStreamSynchronize) - during a capture
//     nothing runs, so there is nothing to wait for; CUDA reports it and the capture fails;
//   - it reads its inputs from, and writes its outputs to, tensors allocated BEFORE the capture
//     (copy each batch into the same input tensors before replay()); every tensor it allocates
//     must also die inside it (the allocations are the graph's own memory, reused by each replay);
//   - any value that changes from step to step (the LR) is read from device memory, never passed
//     as a kernel argument, which the graph would freeze at its captured value.
// Mode: cudaStreamCaptureModeThreadLocal. The data loader's and NCCL watchdog's threads keep making
// CUDA calls on other streams (event queries, pinned allocations) while the main thread captures;
// Global mode would make those calls fail. Their work on the compute stream would still be
// captured, which is why nothing but the caller may enqueue there meanwhile (train_imagenet's loader
// issues its copies from the loop's thread, between steps).
// Warm-up: PyTorch warms up on a side stream so that the caching allocator's per-stream pools and
// the capture stream differ from the default stream; tandem's compute stream is already a
// non-blocking stream of its own and its allocator is stream-ordered, so warm-up and capture both
// run on it and the caller's ordinary eager steps are the warm-up.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <utility>
#include <vector>

namespace tandem::cuda {

class StepGraph {
 public:
  explicit StepGraph(int device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs `step` under capture on the compute stream (nothing executes) and instantiates the graph.
  // Throws tandem::Error naming what made the capture fail (the failing call's own message and a
  // sentence on what that kind of failure means), leaving the stream usable for eager work.
  void capture(const std::function<void()>& step);
  // Enqueues one execution of the captured step on the compute stream (the host does not wait).
  void replay();
  bool captured() const { return exec_ != nullptr; }
  size_t nodes() const { return nodes_; }  // kernels, copies, memsets, allocations, ... in the graph

 private:
  int device_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  std::vector<std::pair<void*, int>> kept_;  // pre-capture blocks the step dropped: freed with the graph
};

}  // namespace tandem::cuda
