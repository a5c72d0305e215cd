// core/host_cache.h: large CPU blocks kept after their Storage dies, for the next one of that size.
//
// Why: glibc serves blocks from 128 KiB up (its initial mmap threshold; from 32 MiB up always) with
// fresh mmaps and unmaps them on free, so every step's large temporaries (activations, a Linear's weight gradient: VGG-16's
// 25088 x 4096 classifier makes 400 MB of it per step) cost one page fault, and the kernel's zeroing
// of that page, per 4 KiB touched, every step: 1.45 M faults and 20 % of the CPU time in 5 steps of
// VGG-16 at 64 px (apps/results/2026-11-28-cpu-2core/README.md). PyTorch's CPU allocator pays the
// same. A freed block of >= kMinBytes goes to this cache instead, and an allocation takes the
// smallest cached block that fits with at most 1/8 waste.
// Bound: the cache never makes the process hold more than 9/8 of its peak of live blocks. Before a
// miss allocates, cached blocks are released (least recently freed first) until the live blocks,
// the cached ones and the new one fit in 9/8 of the largest live total this process ever reached
// (or in live + the new one, when that is a new peak: then nothing stays cached); so the footprint is
// the peak that glibc also reaches, plus 1/8 (kPeakSlackDivisor in host_cache.cpp says why).
// Not used under AddressSanitizer: a reused block would hide a use after free from it.
// Contents of a reused block are whatever its last owner left (as aligned_alloc promises nothing
// either); tensors that need zeros fill them (Tensor::zeros).
// Thread-safe (one mutex: only blocks of >= kMinBytes come here, each worth far more than a lock).
#pragma once
#include <cstddef>
#include <cstdint>

namespace tandem::host_cache {

// The smallest block that is cached: glibc's largest mmap threshold (32 MiB on 64-bit systems).
// Smaller blocks come from glibc's heap.
constexpr size_t kMinBytes = 32 * 1024 * 1024;

// Sets glibc's heap, for the whole process, to keep what is freed: a fixed mmap threshold of
// kMinBytes and no trimming of the heap's top, so a step's smaller temporaries reuse memory that is
// already mapped, whatever their sizes (without it glibc maps blocks of 128 KiB and up anew, and
// gives the heap's top back, until its dynamic threshold grows). Process-wide, so the program
// decides: the trainers and benches call it once at start-up; the library never does. Idempotent;
// nothing under AddressSanitizer (its allocator ignores it).
void keep_freed_heap();

// A 64-byte aligned block of at least `bytes` (a multiple of 64); null when the system has no memory.
void* allocate(size_t bytes);
// Gives back a block from allocate() with the same `bytes`.
void release(void* p, size_t bytes);
// Frees every cached block (their memory goes back to the system).
void empty();

struct Stats {
  int64_t cached_bytes = 0;  // bytes in blocks held for reuse now
  int64_t live_bytes = 0;    // bytes in blocks handed out and not given back (cache-sized ones only)
  int64_t peak_bytes = 0;    // the largest live_bytes so far: live + cached <= 9/8 of it
  int64_t hits = 0;          // allocations served from the cache
  int64_t misses = 0;        // allocations that went to the system (cache-sized ones only)
};
Stats stats();
bool enabled();  // false under AddressSanitizer (every call then goes to the system)

}  // namespace tandem::host_cache
