// core/graph_capture.h: what the rest of tandem must know while a CUDA graph is being captured.
//
// A capture (core/cuda/graph.h, StepGraph) records the work enqueued on one device's compute stream
// instead of running it. Three places behave differently meanwhile, and they ask here:
//   - Storage (core/storage.cpp): a block allocated during the capture becomes a graph allocation
//     (cudaMallocAsync on a capturing stream is a memory node, replayed with the graph at the same
//     address). It must also be freed during the capture, so the graph owns every byte it allocates
//     and can be relaunched; the capture counts such blocks and fails if one outlives it (a tensor
//     made inside the step escaped: copy it into a tensor made before the capture). A block
//     allocated BEFORE the capture and dropped during it may not be freed by the graph (a free node
//     may only free graph memory), and the graph may still read it at every replay: its free is
//     handed to the StepGraph, which frees it with the graph.
//   - dist's reducer and NCCL communicator: the events they would keep for timing and for the
//     watchdog are recorded inside the graph, where the host can never query them; they skip that.
//   - the optimizers: a host value passed as a kernel argument would be frozen into the graph, so
//     anything that changes between steps (the LR) must be read from device memory.
// Host-side bookkeeping only, built with or without CUDA (CPU builds: never active).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace tandem::graph_capture {

// True while some thread is capturing the compute stream of `device` (any device when -1).
bool active(int device = -1);

// Runs `query` (a call on a compute stream from another thread: the watchdog's cuda_fault) only
// when no capture is open, atomically with begin(): checking active() and then querying would let
// a capture begin in between, and a query of a capturing stream invalidates the capture.
// Returns whether it ran. `query` must not block or call back into this file.
bool unless_active(const std::function<void()>& query);

// StepGraph's side: one capture at a time in the process.
void begin(int device);
struct Leftovers {
  int64_t live_blocks = 0;  // blocks allocated during the capture and still alive (must be 0)
  int64_t live_bytes = 0;
  std::vector<std::pair<void*, int>> deferred_frees;  // (pointer, device): pre-capture blocks dropped
};
Leftovers end();

// Storage's side (core/storage.cpp).
void note_alloc(size_t bytes);  // a block allocated during the capture
void note_free(size_t bytes);   // such a block freed during the same capture
void defer_free(void* ptr, int device);
// The generation of the capture now open (0: none); a block remembers the one it was born in.
uint64_t generation();

}  // namespace tandem::graph_capture
