// core/cuda/graph.cpp: StepGraph - begin/end capture around a callable, instantiate, replay; and
// the explanation of each way a capture can fail (see graph.h for the contract).
#include "core/cuda/graph.h"

#include <exception>
#include <string>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/graph_capture.h"

namespace tandem::cuda {
namespace {

// What a CUDA capture error found in `message` means for a training step, and what to change.
std::string explain(const std::string& message) {
  struct Hint { const char* name; const char* meaning; };
  static const Hint hints[] = {
      {"cudaErrorStreamCaptureUnsupported",
       "the step did something a capture cannot record: a host synchronisation (.item(), to_vector, "
       "cudaStreamSynchronize, a synchronous cudaMemcpy, a host-side check of device values) or a "
       "cudaMalloc. Move it out of the captured step or keep the value on the device"},
      {"cudaErrorStreamCaptureInvalidated",
       "an earlier illegal call (a host sync, or a query of the capturing stream from another thread) "
       "invalidated the capture; the call named above is only where that was noticed"},
      {"cudaErrorStreamCaptureUnjoined",
       "work forked onto a side stream (a collective on the NCCL stream) was not joined back into the "
       "compute stream: every collective's Work must be waited for inside the step"},
      {"cudaErrorStreamCaptureImplicit",
       "the legacy default stream was used (a call without an explicit stream); tandem's work must go "
       "to cuda::compute_stream()"},
      {"cudaErrorStreamCaptureIsolation",
       "the capture was joined with a stream that is not part of it (an event recorded outside the step)"},
      {"cudaErrorStreamCaptureMerge", "two independent captures were merged through an event"},
      {"cudaErrorCapturedEvent",
       "an event recorded inside the capture was queried or waited for on the host: timing events "
       "can only be read around a replay, not inside the step"},
      {"cudaErrorStreamCaptureWrongThread", "the capture was ended on another thread than the one that began it"},
      {"nccl",
       "a collective could not be captured: NCCL supports capture from version 2.9 on; MPI and "
       "host-staged collectives (TANDEM_HOST_STAGING) run on a CPU thread and never can"},
  };
  for (const Hint& h : hints)
    if (message.find(h.name) != std::string::npos) return std::string(" -> ") + h.meaning + ".";
  return "";
}

void free_blocks(const std::vector<std::pair<void*, int>>& blocks) {
  for (auto [ptr, device] : blocks) (void)cudaFreeAsync(ptr, compute_stream(device));  // stream-ordered
}

}  // namespace

StepGraph::StepGraph(int device) : device_(device) {}

StepGraph::~StepGraph() {
  // No throw in a destructor. cudaGraphExecDestroy's documentation does not say that an executable
  // graph may be destroyed while a launch of it still runs, so the last replay is waited for first
  // (teardown only; a hung replay is the watchdog's to report). Its allocations go back to the
  // device's graph memory pool, which keeps them for later graphs until cudaDeviceGraphMemTrim.
  // The pre-capture blocks it read are freed after it.
  if (exec_ && cudaStreamSynchronize(compute_stream(device_)) != cudaSuccess) (void)cudaGetLastError();
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  free_blocks(kept_);
}

void StepGraph::capture(const std::function<void()>& step) {
  TANDEM_CHECK(!captured(), "StepGraph::capture: this graph already holds a captured step; make a new StepGraph");
  // TANDEM_SYNC_CHECK synchronises the stream after every launch (core/check.h), which no capture
  // can contain: say so here rather than through the capture error of the first kernel.
  TANDEM_CHECK(!sync_check_enabled(), "TANDEM_SYNC_CHECK=1 synchronises after every kernel, which a CUDA graph "
               "capture cannot record: unset it to capture, or find the faulting kernel without graphs");
  CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t s = compute_stream(device_);
  // Drain the eager warm-up first: its events (timeline, watchdog) all complete before the capture,
  // so no thread has a reason to query the compute stream while it is capturing.
  CUDA_CHECK(cudaStreamSynchronize(s), "the eager steps before the CUDA graph capture failed");
  graph_capture::begin(device_);
  cudaError_t began = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (began != cudaSuccess) {
    graph_capture::end();
    TANDEM_THROW("cudaStreamBeginCapture failed: ", cudaGetErrorName(began), " (", cudaGetErrorString(began),
                 "). CUDA graphs need CUDA 11.4+ with stream-ordered allocation support on this GPU");
  }
  std::string failure;
  try {
    step();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  graph_capture::Leftovers left = graph_capture::end();
  // cudaStreamEndCapture's documentation: an invalidated capture returns a NULL graph (its listed
  // return codes do not include the invalidation itself), so a null graph is a failure too.
  if (!failure.empty() || ended != cudaSuccess || g == nullptr || left.live_blocks != 0) {
    if (g) cudaGraphDestroy(g);
    free_blocks(left.deferred_frees);  // no graph refers to them now
    (void)cudaGetLastError();  // capture errors are not sticky: clear them so eager work can go on
    if (!failure.empty())
      TANDEM_THROW("capturing the training step as a CUDA graph failed: ", failure, explain(failure));
    if (ended != cudaSuccess) {
      const std::string what = std::string(cudaGetErrorName(ended)) + " (" + cudaGetErrorString(ended) + ")";
      TANDEM_THROW("cudaStreamEndCapture failed: ", what, explain(what));
    }
    if (g == nullptr)
      TANDEM_THROW("the CUDA graph capture was invalidated by a call whose error the step ignored: look in the "
                   "step for a CUDA call whose result is not checked (an event or stream query, a "
                   "synchronisation); CUDA refused it because the stream was capturing");
    TANDEM_THROW("the captured step allocated ", left.live_blocks, " block(s) (", left.live_bytes,
                 " bytes) that are still alive after it: a tensor made inside the step escapes it, and the "
                 "graph would hand its memory to the next replay. Copy such results into tensors allocated "
                 "before the capture and drop the step's own tensors inside it");
  }
  graph_ = g;
  // Blocks from before the capture that the step dropped: the graph may still read them (the step
  // used them before dropping them), so they live as long as the graph, as PyTorch keeps its
  // capture's private pool alive.
  kept_ = std::move(left.deferred_frees);
  CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    // Nothing will ever run the graph: release it and the blocks kept for it, so that this
    // StepGraph holds nothing (a second capture() would otherwise leak them).
    exec_ = nullptr;
    cudaGraphDestroy(graph_);
    graph_ = nullptr;
    free_blocks(kept_);
    kept_.clear();
    (void)cudaGetLastError();
    TANDEM_THROW("cudaGraphInstantiate of the captured step (", nodes_, " nodes) failed: ", cudaGetErrorName(inst),
                 " (", cudaGetErrorString(inst), ")");
  }
  // The eager warm-up's activations sit cached in the stream-ordered pool (release threshold
  // UINT64_MAX, core/storage.cpp), while the graph's allocations have a pool of their own: hand the
  // cached bytes back so the graph can have them instead of holding both.
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

void StepGraph::replay() {
  TANDEM_CHECK(captured(), "StepGraph::replay: nothing captured yet; call capture() first");
  CUDA_CHECK(cudaGraphLaunch(exec_, compute_stream(device_)), "replaying the captured step");
}

}  // namespace tandem::cuda
