// core/cuda/context.cpp: lazily created per-device compute streams.
#include "core/cuda/context.h"

#include <array>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/device.h"
#include "core/graph_capture.h"

namespace tandem::cuda {
namespace {
std::array<cudaStream_t, 16> g_streams{};
std::mutex g_mutex;
}  // namespace

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t compute_stream(int device) {
  TANDEM_CHECK(device >= 0 && device < 16, "device index ", device, " out of range");
  if (g_streams[device]) return g_streams[device];
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_streams[device]) {
    int prev = current_device();
    CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaSetDevice(prev));
    g_streams[device] = s;
  }
  return g_streams[device];
}

cudaStream_t compute_stream() { return compute_stream(current_device()); }

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(compute_stream()), "an earlier kernel failed"); }

}  // namespace tandem::cuda

namespace tandem {
void sync_check_after(const char* file, int line) {
  cudaError_t e = cudaStreamSynchronize(cuda::compute_stream());
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess)
    throw_error(file, line, detail::cat("kernel fault: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                                        ") in the GPU work issued here (TANDEM_SYNC_CHECK=1 synchronised "
                                        "right after it). Run under compute-sanitizer for the exact access"));
}

std::string cuda_fault() {
  // A kernel fault is sticky: every later call on the context returns it. cudaStreamQuery does not
  // block, so this is safe to call from a watchdog while the stream still runs.
  // Not while a CUDA graph is captured (core/graph_capture.h): querying a capturing stream from this
  // (watchdog) thread would invalidate the capture; a sticky fault still shows in cudaPeekAtLastError.
  cudaError_t e = cudaSuccess;
  graph_capture::unless_active([&] { e = cudaStreamQuery(cuda::compute_stream()); });
  if (e == cudaSuccess || e == cudaErrorNotReady) e = cudaPeekAtLastError();
  if (e == cudaSuccess || e == cudaErrorNotReady) return "";
  return detail::cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace tandem
