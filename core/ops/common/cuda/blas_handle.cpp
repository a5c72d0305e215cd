// core/ops/common/cuda/blas_handle.cpp: lazily created cuBLASLt handles and workspaces, one per device.
//
// Both are created once and deliberately never destroyed: destroying them from static destructors
// would race the CUDA runtime's own teardown at process exit.
#include "core/ops/common/cuda/blas_handle.h"

#include <array>
#include <memory>
#include <mutex>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/storage.h"

namespace tandem::cuda {
namespace {

constexpr int kMaxDevices = 16;  // matches core/cuda/context.cpp
std::array<cublasLtHandle_t, kMaxDevices> g_handles{};
std::array<Storage*, kMaxDevices> g_workspaces{};
std::mutex g_mutex;

int checked_device() {
  int d = current_device();
  TANDEM_CHECK(d >= 0 && d < kMaxDevices, "device index ", d, " out of range (at most 16 GPUs per process)");
  return d;
}

}  // namespace

cublasLtHandle_t blaslt_handle() {
  int d = checked_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_handles[d]) CUBLAS_CHECK(cublasLtCreate(&g_handles[d]), "could not create a cuBLASLt handle on cuda:", d);
  return g_handles[d];
}

void* blas_workspace() {
  int d = checked_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  // Allocated through Storage so it shows up in tandem's memory counters.
  if (!g_workspaces[d]) g_workspaces[d] = new Storage(kBlasWorkspaceBytes, Device::cuda(d));
  return g_workspaces[d]->data();
}

}  // namespace tandem::cuda
