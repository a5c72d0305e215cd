// core/graph_capture.cpp: the open capture's device, generation and allocation counts (see the header).
#include "core/graph_capture.h"

#include <atomic>
#include <mutex>

#include "core/check.h"

namespace tandem::graph_capture {
namespace {
// Atomics and a mutex: a data-loader or watchdog thread may free a block while the main thread
// captures, and its free must be deferred like the main thread's.
std::atomic<int> g_device{-1};
std::atomic<uint64_t> g_generation{0};
uint64_t g_next = 0;
std::mutex g_mutex;
Leftovers g_left;
}  // namespace

bool active(int device) {
  const int d = g_device.load();
  return d >= 0 && (device < 0 || d == device);
}

bool unless_active(const std::function<void()>& query) {
  std::lock_guard<std::mutex> lock(g_mutex);  // begin() takes it too: no capture opens meanwhile
  if (g_device.load() >= 0) return false;
  query();
  return true;
}

void begin(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  TANDEM_CHECK(g_device.load() < 0, "a CUDA graph capture is already open on cuda:", g_device.load(),
               "; captures cannot be nested or run at the same time");
  g_left = {};
  g_generation = ++g_next;
  g_device = device;
}

Leftovers end() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_device = -1;
  g_generation = 0;
  return std::move(g_left);
}

void note_alloc(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_left.live_blocks, g_left.live_bytes += static_cast<int64_t>(bytes);
}

void note_free(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_left.live_blocks, g_left.live_bytes -= static_cast<int64_t>(bytes);
}

void defer_free(void* ptr, int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_left.deferred_frees.emplace_back(ptr, device);
}

uint64_t generation() { return g_generation.load(); }

}  // namespace tandem::graph_capture
