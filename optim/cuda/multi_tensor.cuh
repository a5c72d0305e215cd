// optim/cuda/multi_tensor.cuh: what the fused multi-tensor optimizer kernels share (internal, CUDA).
//
// The pattern (as optim/cuda/sgd.cu): every tensor is cut into chunks of at most kChunk elements,
// the chunks of all tensors are listed in one device array (the chunk table), and block b of ONE
// launch works on chunk b with kThreads threads striding over it. Every block gets the same bounded
// work however uneven the tensors are, and a step costs one launch instead of one per tensor.
// DeviceTable keeps the chunk table on the device between steps and uploads it again only when its
// bytes change (new pointers or sizes: normally once per run), on the compute stream, so a later
// upload is ordered after the kernels that read the old one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ops/cuda/dispatch.cuh"

namespace tandem::optim::kernels {

constexpr int64_t kChunk = 32768;  // elements per block: 128 per thread at 256 threads
constexpr int kThreads = 256;

class DeviceTable {
 public:
  DeviceTable() = default;
  DeviceTable(const DeviceTable&) = delete;
  DeviceTable& operator=(const DeviceTable&) = delete;
  ~DeviceTable();
  // A device copy of the n bytes at `bytes`, uploaded on `device`'s compute stream when they differ
  // from the previous call's. Entries should have no padding, so equal tables compare equal.
  const void* get(int device, const void* bytes, size_t n);
  template <typename E>
  const E* get(int device, const std::vector<E>& v) {
    return static_cast<const E*>(get(device, v.data(), v.size() * sizeof(E)));
  }

 private:
  void* dev_ = nullptr;
  size_t capacity_ = 0;
  int device_ = -1;
  std::vector<unsigned char> host_;
};

// Calls f(start, len) for each chunk of a tensor of n elements, in order.
template <typename F>
void for_each_chunk(int64_t n, F&& f) {
  for (int64_t s = 0; s < n; s += kChunk) f(s, static_cast<int32_t>(n - s < kChunk ? n - s : kChunk));
}

// Grid size check shared by the launchers: one block per chunk.
void check_grid(int64_t n_chunks, const char* what);

}  // namespace tandem::optim::kernels
