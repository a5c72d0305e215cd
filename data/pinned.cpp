// data/pinned.cpp: cudaMemcpyAsync/cudaEvent in CUDA builds, no-ops otherwise (HostBuffer's
// allocation is core/storage.cpp's).
#include "data/pinned.h"

#include "core/check.h"
#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/context.h"
#endif

namespace tandem::data {

void copy_to_device_async(const void* src, Tensor& dst) {
  TANDEM_CHECK(dst.is_cuda(), "copy_to_device_async: destination ", dst.str(), " is not a CUDA tensor");
#ifdef TANDEM_WITH_CUDA
  cudaStream_t s = cuda::compute_stream(dst.device().index);
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
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), cuda::compute_stream(device.index)));
  recorded_ = true;
#endif
}

void CopyFence::wait() {
#ifdef TANDEM_WITH_CUDA
  if (recorded_) CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "a batch copy failed");
#endif
}

}  // namespace tandem::data
