// core/ops/common/cuda/pack_width.h: which pack width (elements per access) and register layout the
// bandwidth kernels of layer norm, softmax and pooling take for a given problem (internal; plain
// host C++, so a CPU-only test pins the rules: tests/test_pack_width.cpp).
//
// A Pack<T, N> access (core/ops/common/cuda/pack.cuh) moves N consecutive elements, N a power of
// two up to 16 bytes; it is legal only on pointers aligned to its size, so every rule checks the
// pointers (a view at an odd offset falls back to narrower packs or to the generic kernel). The
// warp-per-row kernels hold a row in registers, at most `max_per_lane` elements per lane; rows
// longer than 32 * max_per_lane take the generic kernel (a return value of 0).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tandem::cuda {

// True when every non-null pointer is aligned to `bytes`.
inline bool aligned_to(std::initializer_list<const void*> ptrs, size_t bytes) {
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}

// Slots per lane for a warp holding a row of `packs` packs: the smallest power of two S with
// S * 32 >= packs (1 for an empty row).
inline int slots_for(int64_t packs) {
  int s = 1;
  while (s * 32LL < packs) s *= 2;
  return s;
}

// Softmax (a warp per row of `cols` elements): the widest N <= 16 / elem_bytes that divides cols,
// gives every lane work (cols / N >= 32; a row shorter than a warp gets N = 1) and to whose
// N * elem_bytes the pointers are aligned. 0: generic kernel.
inline int row_pack_width(int64_t cols, size_t elem_bytes, int max_per_lane, std::initializer_list<const void*> ptrs) {
  if (cols < 1 || cols > 32LL * max_per_lane || elem_bytes == 0 || elem_bytes > 16) return 0;
  int n = static_cast<int>(16 / elem_bytes);
  while (n > 1 && (cols % n != 0 || cols / n < 32 || !aligned_to(ptrs, n * elem_bytes))) n /= 2;
  return n;
}

// Layer norm (a warp per row of d elements in 16-byte packs only): the slot count S (packs per
// lane), the smallest power of two with S * 32 packs >= the row, when d is a multiple of the
// 16-byte width, the pointers are 16-byte aligned and S packs fit max_per_lane. 0: generic kernel.
inline int row_slots(int64_t d, size_t elem_bytes, int max_per_lane, std::initializer_list<const void*> ptrs) {
  if (d < 1 || elem_bytes == 0 || elem_bytes > 16 || 16 % elem_bytes != 0) return 0;
  const int64_t v = static_cast<int64_t>(16 / elem_bytes);
  if (d % v != 0 || d > 32LL * max_per_lane || !aligned_to(ptrs, 16)) return 0;
  const int s = slots_for(d / v);
  return s * v <= max_per_lane ? s : 0;
}

// Pooling (a thread per group of V channels): the widest V <= 16 / elem_bytes that divides C, given
// every pointer 32-byte aligned (the int32 argmax packs of 8 are 32 bytes); 1 otherwise.
inline int channel_group_width(int64_t C, size_t elem_bytes, std::initializer_list<const void*> ptrs) {
  if (elem_bytes == 0 || elem_bytes > 16 || !aligned_to(ptrs, 32)) return 1;
  int v = static_cast<int>(16 / elem_bytes);
  while (v > 1 && C % v != 0) v /= 2;
  return v;
}

}  // namespace tandem::cuda
