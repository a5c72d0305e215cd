// optim/cuda/multi_tensor.cuh: what the fused multi-tensor optimizer kernels share (internal, CUDA).
//
// The pattern (as optim/cuda/sgd.cu): every tensor is cut into chunks of at most kChunk elements,
// the chunks of all tensors are listed in one device array (the chunk table), and block b of ONE
// launch works on chunk b with kThreads threads striding over it. Every block gets the same bounded
// work however uneven the tensors are, and a step costs one launch instead of one per tensor.
// DeviceTable keeps the chunk table on the device between steps and uploads it again only when its
// bytes change (new pointers or sizes: normally once per run), on the compute stream, so a later
// upload is ordered after the kernels that read the old one.
//
// What a CUDA graph capture (core/cuda/graph.h) needs from these helpers: nothing uploaded from the
// host while capturing - a copy from host memory would be frozen into the graph, and the kernels
// would read the captured bytes at every replay. So DeviceTable and DeviceValue refuse to upload
// during a capture (the step must run eagerly once first, with the same tensors), and every value
// that changes between steps is read by the kernels from device memory: the LR (DeviceValue,
// written by set_lr before the replay), the update counts (advance_counts, on the device) and the
// found-inf flag.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ops/common/cuda/dispatch.cuh"
#include "optim/kernels/low_copy.h"

namespace tandem::optim::kernels {

constexpr int64_t kChunk = 32768;  // elements per block: 128 per thread at 256 threads
constexpr int kThreads = 256;

// Device memory owned by one object: copying it would free the memory twice.
struct DeviceOwner {
  DeviceOwner() = default;
  DeviceOwner(const DeviceOwner&) = delete;
  DeviceOwner& operator=(const DeviceOwner&) = delete;
};

class DeviceTable : DeviceOwner {
 public:
  ~DeviceTable();
  // A device copy of the n bytes at `bytes`, uploaded on `device`'s compute stream when they differ
  // from the previous call's; refused inside a graph capture (`who` names the optimizer in the
  // error). Entries should have no padding, so equal tables compare equal.
  const void* get(int device, const void* bytes, size_t n, const char* who);
  template <typename E>
  const E* get(int device, const std::vector<E>& v, const char* who) {
    return static_cast<const E*>(get(device, v.data(), v.size() * sizeof(E), who));
  }

 private:
  void* dev_ = nullptr;
  size_t capacity_ = 0;
  int device_ = -1;
  std::vector<unsigned char> host_;
};

// A host value that kernels read from device memory (the LR): as a kernel argument it would be
// frozen by a graph capture at its captured value, while the schedule changes it every step. The
// write is a one-thread kernel taking the value as its argument, not a cudaMemcpyAsync from host
// memory: a copy from pageable memory "might be synchronous with respect to host"
// (cuda_runtime_api.h, memcpy behaviour), which would stall the host behind the previous step every
// step - the launch overhead that graphs remove; a kernel argument is copied at launch. Stored in
// f64, the host's own precision, so each kernel rounds it exactly as the host code did.
class DeviceValue : DeviceOwner {
 public:
  ~DeviceValue();
  // The device copy on `device`, written (stream-ordered) when `value` differs from the last write.
  // Inside a capture a write would be frozen into the graph, so a changed value is refused there.
  const double* get(int device, double value, const char* who);
  // set_lr's side: writes `value` now when a device copy exists, so that the next replay reads it;
  // nothing before the first get() (that one writes it).
  void set(double value, const char* who);

 private:
  double* dev_ = nullptr;
  int device_ = -1;
  double host_ = 0;
};

// *counts[i] += 1 for every i, unless found_inf is not null and *found_inf != 0: the update counts
// of a fused step, advanced by one launch AFTER the kernels that read them (stream order), so that
// every block of the update saw the same count. `table` caches the pointer list.
void advance_counts(DeviceTable& table, int device, const std::vector<float*>& counts, const float* found_inf,
                    const char* who);

// True when the step is skipped: every thread of every block reads the same flag (it does not
// change during the launch), so an early return is uniform over a block.
__device__ __forceinline__ bool skip_step(const float* found_inf) { return found_inf && *found_inf != 0.f; }

// The 16-bit working copy's store (optim/kernels/low_copy.h): element i of `low` (already offset to
// the chunk; null: no copy) = v rounded to nearest even, as core's cast kernel rounds. `kind` is a
// launch argument, the same for every thread: the branch is uniform.
__device__ __forceinline__ void store_low(void* low, int i, float v, LowKind kind) {
  if (!low) return;
  if (kind == LowKind::BF16) static_cast<__nv_bfloat16*>(low)[i] = cuda::from_float<__nv_bfloat16>(v);
  else if (kind == LowKind::F16) static_cast<__half*>(low)[i] = cuda::from_float<__half>(v);
}

// The chunk's part of a segment's low copy (2-byte elements either kind; null stays null).
__device__ __forceinline__ void* low_at(void* low, int64_t start) {
  return low ? static_cast<uint16_t*>(low) + start : nullptr;
}

// Calls f(start, len) for each chunk of a tensor of n elements, in order.
template <typename F>
void for_each_chunk(int64_t n, F&& f) {
  for (int64_t s = 0; s < n; s += kChunk) f(s, static_cast<int32_t>(n - s < kChunk ? n - s : kChunk));
}

// Grid size check shared by the launchers: one block per chunk.
void check_grid(int64_t n_chunks, const char* what);

// A chunk table kept across steps (the capturable launchers'): checks the grid, creates `table` at
// the first call, and returns the device copy of `host` (uploaded only when it changed).
template <typename E>
const E* cached_chunks(std::shared_ptr<DeviceTable>& table, int device, const std::vector<E>& host, const char* who) {
  check_grid(static_cast<int64_t>(host.size()), who);
  if (!table) table = std::make_shared<DeviceTable>();
  return table->get(device, host, who);
}

}  // namespace tandem::optim::kernels
