// data/pinned.cpp: the copy stream, cudaMemcpyAsync and the fences in CUDA builds, no-ops otherwise
// (HostBuffer's allocation is core/storage.cpp's). The stream/event picture is in pinned.h.
#include "data/pinned.h"

#include "core/check.h"
#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "core/cuda/context.h"
#endif

namespace tandem::data {

#ifdef TANDEM_WITH_CUDA
namespace {
// One copy stream per device, created on first use and never destroyed (like the compute streams
// of core/cuda/context.cpp: a stream destroyed at exit could race work still queued on it).
cudaStream_t copy_stream(int device) {
  static std::array<cudaStream_t, 16> streams{};
  static std::mutex mu;
  TANDEM_CHECK(device >= 0 && device < 16, "device index ", device, " out of range");
  std::lock_guard<std::mutex> lk(mu);
  if (!streams[device]) {
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    CUDA_CHECK(cudaSetDevice(device));
    // Non-blocking: no implicit ordering with the legacy default stream; all ordering is by events.
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
    CUDA_CHECK(cudaSetDevice(prev));
  }
  return streams[device];
}
}  // namespace
#endif

void copy_stream_wait_compute(Device device) {
  if (device.is_cpu()) return;
#ifdef TANDEM_WITH_CUDA
  cudaEvent_t a;
  CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(a, cuda::compute_stream(device.index)));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream(device.index), a, 0));
  CUDA_CHECK(cudaEventDestroy(a));  // the driver keeps it until the wait has consumed it
#endif
}

void copy_to_device_async(const void* src, Tensor& dst) {
  TANDEM_CHECK(dst.is_cuda(), "copy_to_device_async: destination ", dst.str(), " is not a CUDA tensor");
#ifdef TANDEM_WITH_CUDA
  cudaStream_t s = copy_stream(dst.device().index);
  CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src, dst.nbytes(), cudaMemcpyHostToDevice, s));
#else
  (void)src;
  TANDEM_THROW("copy_to_device_async in a CPU-only build");
#endif
}

CopyFence::~CopyFence() {
#ifdef TANDEM_WITH_CUDA
  if (event_) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(event_));  // the buffer it guards may be freed next
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
#endif
}

void CopyFence::record(Device device) {
  if (device.is_cpu()) return;
#ifdef TANDEM_WITH_CUDA
  if (!event_) {
    cudaEvent_t e;
    // Timing off: the fence is only waited on, and timing-disabled events are cheaper to record.
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), copy_stream(device.index)));
  recorded_ = true;
#endif
}

void CopyFence::compute_wait(Device device) {
  if (device.is_cpu() || !recorded_) return;
#ifdef TANDEM_WITH_CUDA
  // Captures the fence's latest record now: a later record() (the slot's next batch) cannot move it.
  CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(device.index), static_cast<cudaEvent_t>(event_), 0));
#endif
}

void CopyFence::wait() {
#ifdef TANDEM_WITH_CUDA
  if (recorded_) CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "a batch copy failed");
#endif
}

}  // namespace tandem::data
