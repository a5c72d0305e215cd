// data/pinned.h: host staging buffers and the host-to-device copy of a batch.
//
// A HostBuffer is a movable owner of one CPU Storage block (core/storage.h): page-locked
// (HostMemory::Pinned, cudaHostAlloc) when tandem is built with CUDA, a GPU is visible and pinning
// was asked for; otherwise ordinary 64-byte aligned memory. Pinned memory is what lets
// cudaMemcpyAsync run as a true DMA transfer that overlaps with kernels; from pageable memory the
// driver stages through its own pinned buffer and the copy blocks the host. Like every Storage,
// its bytes count towards the CPU's memory counters.
//
// Copies run on a copy stream of their own (one per device, created on first use), so the copy of
// the next batch overlaps with the kernels of the current step. Every hand-off is an event, never a
// host sync:
//   compute: ... kernels enqueued so far | A |  step k's kernels ...  | wait F | step k+1's kernels
//   copy:                                     wait A | copy batch k+1 | F
// A (copy_stream_wait_compute): the destination tensors were just allocated in compute-stream
//   order, and cudaMallocAsync may hand out memory that compute work still queued has freed, so the
//   copy stream must not write them before the compute stream got there;
// F (CopyFence::record): the end of the batch's copies. The compute stream waits on it before the
//   step that reads the batch (CopyFence::compute_wait), and the loader's host waits on it before
//   refilling the staging buffer (CopyFence::wait): the single host synchronisation in the data
//   path, on a copy that finished long ago unless the prefetch queue is shorter than a step.
// In a CPU-only build both classes are plain memory and no-ops.
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

// A above: the copy stream of `device` waits for everything enqueued on its compute stream so far.
// Call it after allocating the destinations and before copy_to_device_async into them.
void copy_stream_wait_compute(Device device);
// Enqueues a copy of dst.nbytes() bytes from host memory `src` into the CUDA tensor dst on the copy
// stream of dst's device. Returns immediately; src must stay untouched until a CopyFence recorded
// afterwards has been waited on, and dst must not be read before CopyFence::compute_wait.
void copy_to_device_async(const void* src, Tensor& dst);

class CopyFence {
 public:
  CopyFence() = default;
  ~CopyFence();
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;
  // Records the fence on the copy stream of `device`, after the copies enqueued there (no-op for the CPU).
  void record(Device device);
  // The compute stream of `device` waits for the fence: kernels enqueued afterwards see the copied
  // bytes. Does not block the host (no-op for the CPU or when never recorded).
  void compute_wait(Device device);
  // Blocks until the work recorded before the fence has finished (returns at once if never recorded).
  void wait();

 private:
  void* event_ = nullptr;  // cudaEvent_t, opaque here so this header needs no CUDA include
  bool recorded_ = false;
};

}  // namespace tandem::data
