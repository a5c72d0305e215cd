// core/storage.h: a refcounted block of bytes on one device, and the memory counters.
//
// CPU blocks are 64-byte aligned (AVX-512 loads, cache lines). CUDA blocks come from the
// stream-ordered allocator (cudaMallocAsync on the device's compute stream, from a pool whose
// release threshold is UINT64_MAX so freed memory stays in the pool instead of going back to the
// driver: that is what makes cudaMallocAsync as cheap as a caching allocator). Frees are ordered on
// the compute stream too, so a block can be reused by the next kernel without a host sync.
// Work on the communication stream that reads a block must be fenced by events (see dist/).
// A CPU block can also be page-locked (HostMemory::Pinned, cudaHostAlloc): the staging buffers of
// the data loader (data/pinned.h) are such blocks, so there is one owning byte buffer in tandem.
// Every block, pinned or not, counts towards its device's memory counters.
// While a CUDA graph is captured (core/graph_capture.h), CUDA blocks become graph allocations and
// frees of older blocks are deferred to the end of the capture.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace tandem {

// How a CPU block is allocated. Pinned (page-locked) memory lets cudaMemcpyAsync run as a true DMA
// transfer that overlaps with kernels; from pageable memory the driver stages through its own
// pinned buffer and the copy blocks the host. Pinned is honoured only in a CUDA build with a
// visible GPU; otherwise the block is ordinary aligned memory (see Storage::pinned()).
enum class HostMemory { Pageable, Pinned };

class Storage {
 public:
  // `host` is ignored for CUDA devices.
  Storage(size_t bytes, Device device, HostMemory host = HostMemory::Pageable);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }  // page-locked host memory (cudaHostAlloc)
  // Frees the bytes now while every handle keeps this Storage; data() is null until reacquire()
  // allocates bytes() again (contents undefined). ZeRO-3 (dist/zero3.h) frees a unit's gathered
  // parameters between uses this way while the autograd graph still holds views of them, as
  // PyTorch's FSDP does with storage().resize_(0). Both are no-ops when already in that state.
  void release();
  void reacquire();
  bool resident() const { return data_ != nullptr || bytes_ == 0; }

 private:
  void allocate();  // bytes_ on device_, as host_ asks (the constructor and reacquire)
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  bool pinned_ = false;
  uint64_t capture_ = 0;  // the graph capture this CUDA block was allocated in (0: none)
  HostMemory host_ = HostMemory::Pageable;
};

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live Storage blocks now (tensors, pinned staging)
  int64_t peak_bytes = 0;     // high-water mark since start or the last reset_peak_memory
};
MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);

}  // namespace tandem
