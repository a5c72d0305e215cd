// core/storage.h: a refcounted block of bytes on one device, and the memory counters.
//
// CPU blocks are 64-byte aligned (AVX-512 loads, cache lines). CUDA blocks come from the
// stream-ordered allocator (cudaMallocAsync on the device's compute stream, from a pool whose
// release threshold is UINT64_MAX so freed memory stays in the pool instead of going back to the
// driver: that is what makes cudaMallocAsync as cheap as a caching allocator). Frees are ordered on
// the compute stream too, so a block can be reused by the next kernel without a host sync.
// Work on the communication stream that reads a block must be fenced by events (see dist/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace tandem {

class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live tensors now
  int64_t peak_bytes = 0;     // high-water mark since start or the last reset_peak_memory
};
MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);

}  // namespace tandem
