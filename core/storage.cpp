// core/storage.cpp: CPU (aligned or pinned) and CUDA (stream-ordered pool) allocation with byte
// counters. A failed allocation throws OutOfMemory (core/out_of_memory.h) naming the bytes asked for,
// the device, what tandem holds there and what is still available, and what to lower.
// Large CPU blocks are reused through core/host_cache.h (no fresh page faults for every step's temporaries).
#include "core/storage.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/check.h"
#include "core/graph_capture.h"
#include "core/host_cache.h"
#include "core/out_of_memory.h"
#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/context.h"
#endif

namespace tandem {
namespace {

constexpr int kMaxDevices = 17;  // slot 0 is the CPU, 1..16 are GPUs: a node has at most 16 GPUs

struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
std::array<Counter, kMaxDevices> g_counters;

Counter& counter(Device d) {
  int slot = d.is_cpu() ? 0 : 1 + d.index;
  TANDEM_CHECK(slot < kMaxDevices, "device index ", d.index, " is out of range (at most 16 GPUs per process)");
  return g_counters[slot];
}

void count(Device d, int64_t delta) {
  Counter& c = counter(d);
  int64_t now = c.current.fetch_add(delta) + delta;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

#ifdef TANDEM_WITH_CUDA
void configure_pool(int device) {
  static std::array<std::atomic<bool>, kMaxDevices> done{};
  if (done[device].exchange(true)) return;
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  // Keep freed blocks in the pool: without this every free returns memory to the driver at the
  // next sync and cudaMallocAsync degenerates into cudaMalloc.
  uint64_t threshold = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}
#endif

// A CPU block's size as allocated: aligned_alloc wants a multiple of the alignment (64).
size_t rounded_cpu_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

// "could not allocate 1.5 GiB on cuda:0 (12.1 GiB in use by tandem, 0.3 GiB available): ...".
[[noreturn]] void out_of_memory(const char* file, int line, size_t bytes, Device device, const char* what_to_do) {
  const int64_t available = available_memory(device);
  std::string held = human_bytes(static_cast<double>(memory_stats(device).current_bytes)) + " in use by tandem";
  if (available >= 0) held += ", " + human_bytes(static_cast<double>(available)) + " available";
  throw_out_of_memory(file, line,
                      "could not allocate " + human_bytes(static_cast<double>(bytes)) + " on " + device.str() + " (" +
                          held + "): " + what_to_do);
}

// A GPU's memory goes to the model state, activations and workspace; the host's to the data
// pipeline's batches and staging too, and to the other ranks on the machine.
constexpr const char* kGpuAdvice =
    "lower the batch size, train in 16-bit (mixed precision), or shard the optimizer state and gradients (ZeRO)";
constexpr const char* kHostAdvice =
    "lower the batch size (the data loader holds a few batches per rank), or run fewer ranks on this machine";

}  // namespace

int64_t available_memory(Device d) {
  if (d.is_cpu()) {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("MemAvailable:", 0) != 0) continue;
      std::istringstream is(line.substr(13));
      int64_t kib = -1;
      is >> kib;
      return kib >= 0 ? kib * 1024 : -1;
    }
    return -1;
  }
#ifdef TANDEM_WITH_CUDA
  size_t free = 0, total = 0;
  int current = 0;
  bool ok = cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(d.index) == cudaSuccess &&
            cudaMemGetInfo(&free, &total) == cudaSuccess;
  ok = cudaSetDevice(current) == cudaSuccess && ok;
  if (!ok) {
    (void)cudaGetLastError();  // not left for the next launch's check to report as its own
    return -1;
  }
  return static_cast<int64_t>(free);
#else
  return -1;
#endif
}

Storage::Storage(size_t bytes, Device device, HostMemory host) : bytes_(bytes), device_(device), host_(host) {
  allocate();
}

void Storage::reacquire() {
  if (!resident()) allocate();
}

void Storage::allocate() {
  const size_t bytes = bytes_;
  const Device device = device_;
  capture_ = 0;
  if (bytes == 0) return;
#ifdef TANDEM_WITH_CUDA
  if (device.is_cpu() && host_ == HostMemory::Pinned && cuda_available()) {
    // Portable: the loader may copy to a device other than the one current at allocation time.
    const cudaError_t e = cudaHostAlloc(&data_, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      out_of_memory(__FILE__, __LINE__, bytes, device,
                    (std::string("pinning host memory failed (") + cudaGetErrorName(e) +
                     "): lower the batch size, or set the loader's pin_memory = false")
                        .c_str());
    }
    pinned_ = true;
    count(device, static_cast<int64_t>(bytes));
    return;
  }
#endif
  if (device.is_cpu()) {
    // Large blocks through the cache of freed ones (core/host_cache.h: no page faults per step).
    data_ = host_cache::allocate(rounded_cpu_bytes(bytes));
    if (data_ == nullptr) out_of_memory(__FILE__, __LINE__, bytes, device, kHostAdvice);
  } else {
#ifdef TANDEM_WITH_CUDA
    configure_pool(device.index);
    CUDA_CHECK(cudaSetDevice(device.index));
    cudaError_t e = cudaMallocAsync(&data_, bytes, cuda::compute_stream(device.index));
    if (e != cudaSuccess) {
      cudaGetLastError();
      // In a capture the usual cause is not memory: an earlier illegal call (a host sync) broke the
      // capture, and every later call on the stream reports it. Name that error so that StepGraph
      // can explain it (core/cuda/graph.cpp), instead of advising a smaller batch.
      if (graph_capture::active(device.index) && e != cudaErrorMemoryAllocation)
        TANDEM_THROW("allocating ", bytes, " bytes on ", device.str(), " inside a CUDA graph capture failed: ",
                     cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
      out_of_memory(__FILE__, __LINE__, bytes, device, kGpuAdvice);
    }
    // On a capturing stream the allocation is a graph memory node: counted, so the capture can
    // check that each such block is also freed inside it (core/graph_capture.h).
    if (graph_capture::active(device.index)) {
      capture_ = graph_capture::generation();
      graph_capture::note_alloc(bytes);
    }
#else
    TANDEM_THROW("cannot allocate on ", device.str(), ": tandem was built without CUDA");
#endif
  }
  count(device, static_cast<int64_t>(bytes));
}

Storage::~Storage() { release(); }

void Storage::release() {
  if (!data_) return;
  if (pinned_) {
#ifdef TANDEM_WITH_CUDA
    cudaFreeHost(data_);  // no throw in a destructor; a failure here leaks at worst
#endif
  } else if (device_.is_cpu()) {
    host_cache::release(data_, rounded_cpu_bytes(bytes_));
  } else {
#ifdef TANDEM_WITH_CUDA
    // Destructors must not throw; a failed free at teardown is not actionable.
    if (graph_capture::active(device_.index)) {
      if (capture_ != graph_capture::generation()) {
        // A block from before the capture: a graph free node may not free it. Freed at its end.
        graph_capture::defer_free(data_, device_.index);
        count(device_, -static_cast<int64_t>(bytes_));
        data_ = nullptr;
        return;
      }
      graph_capture::note_free(bytes_);  // a free node of the graph: its bytes are the graph's again
    }
    // A failed free (teardown, or a block of a capture that failed and was discarded) must not be
    // left as the "last error" that the next kernel launch's check would report as its own.
    if (cudaFreeAsync(data_, cuda::compute_stream(device_.index)) != cudaSuccess) (void)cudaGetLastError();
#endif
  }
  count(device_, -static_cast<int64_t>(bytes_));
  data_ = nullptr;  // a later reacquire() allocates anew
}

MemoryStats memory_stats(Device d) {
  Counter& c = counter(d);
  return {c.current.load(), c.peak.load()};
}

void reset_peak_memory(Device d) {
  Counter& c = counter(d);
  c.peak.store(c.current.load());
}

}  // namespace tandem
