// core/ops/common/cuda/dnn_handle.cpp: lazily created cuDNN handles, one per device.
//
// Handles are never destroyed: destroying them from static destructors would race the CUDA
// runtime's own teardown at process exit.
#include "core/ops/common/cuda/dnn_handle.h"

#include <array>
#include <mutex>

#include "core/check.h"
#include "core/cuda/context.h"

namespace tandem::cuda {
namespace {
constexpr int kMaxDevices = 16;  // matches core/cuda/context.cpp
std::array<cudnnHandle_t, kMaxDevices> g_handles{};
std::mutex g_mutex;
}  // namespace

cudnnHandle_t dnn_handle() {
  int d = current_device();
  TANDEM_CHECK(d >= 0 && d < kMaxDevices, "device index ", d, " out of range (at most 16 GPUs per process)");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_handles[d]) {
    CUDNN_CHECK(cudnnCreate(&g_handles[d]), "could not create a cuDNN handle on cuda:", d,
                ": check that libcudnn.so.9 matches the CUDA driver");
    CUDNN_CHECK(cudnnSetStream(g_handles[d], compute_stream(d)));
  }
  return g_handles[d];
}

}  // namespace tandem::cuda
