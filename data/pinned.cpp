// data/pinned.cpp: cudaHostAlloc/cudaMemcpyAsync/cudaEvent in CUDA builds, plain memory otherwise.
#include "data/pinned.h"

#include <cstdlib>
#include <utility>

#include "core/check.h"
#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/context.h"
#endif

namespace tandem::data {

HostBuffer::HostBuffer(size_t bytes, bool try_pin) : bytes_(bytes) {
  if (bytes == 0) return;
#ifdef TANDEM_WITH_CUDA
  if (try_pin && cuda_available()) {
    // Portable: the loader may copy to a device other than the one current at allocation time.
    CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocPortable),
               "pinning ", bytes, " bytes of host memory failed; lower the batch size or set pin_memory = false");
    pinned_ = true;
    return;
  }
#endif
  (void)try_pin;
  data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  TANDEM_CHECK(data_ != nullptr, "out of host memory allocating a ", bytes, "-byte batch buffer");
}

HostBuffer::~HostBuffer() {
  if (!data_) return;
#ifdef TANDEM_WITH_CUDA
  if (pinned_) {
    cudaFreeHost(data_);  // no throw in a destructor; a failure here leaks at worst
    return;
  }
#endif
  std::free(data_);
}

void HostBuffer::swap(HostBuffer& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  std::swap(pinned_, o.pinned_);
}

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
