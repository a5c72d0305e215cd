// data/pinned.h: host staging buffers and the host-to-device copy of a batch.
//
// A HostBuffer is a movable owner of one CPU Storage block (core/storage.h): page-locked
// (HostMemory::Pinned, cudaHostAlloc) when tandem is built with CUDA, a GPU is visible and pinning
// was asked for; otherwise ordinary 64-byte aligned memory. Pinned memory is what lets
// cudaMemcpyAsync run as a true DMA transfer that overlaps with kernels; from pageable memory the
// driver stages through its own pinned buffer and the copy blocks the host. Like every Storage,
// its bytes count towards the CPU's memory counters.
//
// CopyFence marks the end of a batch's copies on the compute stream (one CUDA event). The loader
// reuses a staging buffer only after wait() on the fence of the batch that last used it: that is
// the single host synchronisation in the data path, and it waits on a copy that finished long ago
// unless the prefetch queue is shorter than the time a step takes. In a CPU-only build both
// classes are plain memory and no-ops.
#pragma once
#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace tandem::data {

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(size_t bytes, bool try_pin)
      : storage_(std::make_unique<Storage>(bytes, Device::cpu(),
                                           try_pin ? HostMemory::Pinned : HostMemory::Pageable)) {}

  void* data() const { return storage_ ? storage_->data() : nullptr; }
  size_t bytes() const { return storage_ ? storage_->bytes() : 0; }
  bool pinned() const { return storage_ && storage_->pinned(); }

 private:
  std::unique_ptr<Storage> storage_;  // null when default-constructed or moved from
};

// Enqueues a copy of dst.nbytes() bytes from host memory `src` into the CUDA tensor dst on the
// compute stream of dst's device. Returns immediately; src must stay untouched until a CopyFence
// recorded afterwards has been waited on.
void copy_to_device_async(const void* src, Tensor& dst);

class CopyFence {
 public:
  CopyFence() = default;
  ~CopyFence();
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;
  // Records the fence on the compute stream of `device` (no-op for the CPU).
  void record(Device device);
  // Blocks until the work recorded before the fence has finished (returns at once if never recorded).
  void wait();

 private:
  void* event_ = nullptr;  // cudaEvent_t, opaque here so this header needs no CUDA include
  bool recorded_ = false;
};

}  // namespace tandem::data
