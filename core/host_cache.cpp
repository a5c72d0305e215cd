// core/host_cache.cpp: the large-CPU-block cache (contract and bound in host_cache.h).
//
// Free blocks are indexed twice: by size (the allocation's best fit; of equal sizes the last freed,
// whose lines may still be in cache) and by the order they were freed (eviction takes the oldest
// first: the block least likely to match the current step's sizes).
// Live blocks remember their true size, which may exceed what their owner asked for (a fit from a
// larger cached block), so the byte counts stay exact.
#include "core/host_cache.h"

#include <algorithm>
#include <cstdint>
#include <malloc.h>

#include <cstdlib>
#include <limits>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

namespace tandem::host_cache {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kEnabled = false;  // a reused block would hide a use after free from ASan
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kEnabled = false;
#else
constexpr bool kEnabled = true;
#endif
#else
constexpr bool kEnabled = true;
#endif

constexpr size_t kAlign = 64;  // Storage's promise: AVX-512 loads, cache lines
// A cached block serves a request when at most 1/8 of it would be left unused: ResNet's and
// VGG's activation sizes repeat exactly step after step, so fits are mostly exact; the slack lets
// a slightly smaller tensor (a last, partial batch) reuse a block without holding much idle memory.
constexpr size_t kMaxWasteDivisor = 8;
// The cache may hold up to 1/8 of the peak beside it (host_cache.h): a training step's largest
// temporaries are alive at different times, so with no slack each would evict the other. Measured on
// VGG-16 at 64 px b16: the classifier's weight gradients (411 MB and 67 MB) evicted each other every
// step under a bound of exactly the peak; they need 8 % above it (apps/results/2026-11-28-cpu-2core/).
constexpr int64_t kPeakSlackDivisor = 8;

struct State {
  std::mutex mu;
  std::multimap<size_t, std::pair<void*, uint64_t>> by_size;  // free: size -> (block, freed stamp)
  std::map<uint64_t, std::multimap<size_t, std::pair<void*, uint64_t>>::iterator> by_age;  // stamp -> free block
  std::unordered_map<void*, size_t> live;  // handed-out block -> its true size
  uint64_t next_stamp = 0;
  Stats stats;
};

// Never destroyed: Storages of static tensors die after any function-local static would.
State& state() {
  static State* s = new State;
  return *s;
}

void evict_oldest(State& s) {
  auto age = s.by_age.begin();
  auto block = age->second;
  std::free(block->second.first);
  s.stats.cached_bytes -= static_cast<int64_t>(block->first);
  s.by_size.erase(block);
  s.by_age.erase(age);
}

void note_live(State& s, void* p, size_t bytes) {
  s.live[p] = bytes;
  s.stats.live_bytes += static_cast<int64_t>(bytes);
  s.stats.peak_bytes = std::max(s.stats.peak_bytes, s.stats.live_bytes);
}

}  // namespace

// keep_freed_heap: blocks below kMinBytes stay in glibc's heap for good: a fixed mmap threshold (the
// dynamic one starts at 128 KiB, so every larger block was a fresh mapping until the first free
// raised it) and no trimming of the heap's top (with glibc's default of 128 KiB, or twice the
// dynamic threshold, the top of the heap went back to the system each step and came back as page
// faults).
void keep_freed_heap() {
  if (!kEnabled) return;
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMinBytes));
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)done;
}

namespace {

// A block below kMinBytes from glibc's heap: malloc's 16-byte aligned chunk, 64 bytes larger, with
// the chunk's address stored just below the aligned block. Not aligned_alloc: glibc's memalign
// asks for the block plus its alignment plus a header, so a freed block never fits the next request
// of its size, and with the heap kept (keep_freed_heap) each allocation grew it anew (8 MiB
// allocated and freed 8 times: the heap grew 8 x 8 MiB, every page a fault).
void* heap_allocate(size_t bytes) {
  void* chunk = std::malloc(bytes + kAlign);
  if (chunk == nullptr) return nullptr;
  const auto at = reinterpret_cast<uintptr_t>(chunk);
  auto* block = reinterpret_cast<void**>(at + kAlign - at % kAlign);  // >= 16 bytes above the chunk
  block[-1] = chunk;
  return block;
}

void heap_free(void* block) { std::free(static_cast<void**>(block)[-1]); }

}  // namespace

bool enabled() { return kEnabled; }

void* allocate(size_t bytes) {
  if (!kEnabled) return std::aligned_alloc(kAlign, bytes);
  if (bytes < kMinBytes) return heap_allocate(bytes);
  State& s = state();
  std::lock_guard lock(s.mu);
  auto fit = s.by_size.lower_bound(bytes);
  if (fit != s.by_size.end() && fit->first - bytes <= bytes / kMaxWasteDivisor) {
    fit = std::prev(s.by_size.upper_bound(fit->first));  // of equal sizes the last freed: warmest in cache
    void* p = fit->second.first;
    const size_t size = fit->first;
    s.by_age.erase(fit->second.second);
    s.by_size.erase(fit);
    s.stats.cached_bytes -= static_cast<int64_t>(size);
    ++s.stats.hits;
    note_live(s, p, size);
    return p;
  }
  // A miss: keep live + cached + this block within the larger of the peak so far (with its slack)
  // and live + this.
  const auto need = static_cast<int64_t>(bytes);
  const int64_t bound = std::max(s.stats.peak_bytes + s.stats.peak_bytes / kPeakSlackDivisor, s.stats.live_bytes + need);
  while (!s.by_age.empty() && s.stats.live_bytes + s.stats.cached_bytes + need > bound) evict_oldest(s);
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) {  // the cached blocks may be what the system lacks: give them all back, once
    while (!s.by_age.empty()) evict_oldest(s);
    p = std::aligned_alloc(kAlign, bytes);
    if (p == nullptr) return nullptr;
  }
  ++s.stats.misses;
  note_live(s, p, bytes);
  return p;
}

void release(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (!kEnabled) {
    std::free(p);
    return;
  }
  if (bytes < kMinBytes) {
    heap_free(p);
    return;
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.live.find(p);
  if (it == s.live.end()) {  // not from allocate() (cannot happen through Storage): free it as is
    std::free(p);
    return;
  }
  const size_t size = it->second;
  s.live.erase(it);
  s.stats.live_bytes -= static_cast<int64_t>(size);
  const uint64_t stamp = s.next_stamp++;
  auto block = s.by_size.emplace(size, std::make_pair(p, stamp));
  s.by_age.emplace(stamp, block);
  s.stats.cached_bytes += static_cast<int64_t>(size);
}

void empty() {
  State& s = state();
  std::lock_guard lock(s.mu);
  while (!s.by_age.empty()) evict_oldest(s);
}

Stats stats() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.stats;
}

}  // namespace tandem::host_cache
