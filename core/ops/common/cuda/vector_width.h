// core/ops/common/cuda/vector_width.h: when a bandwidth-bound CUDA map may use 16-byte vector accesses
// (internal; plain host C++, so a CPU-only test checks the rule: tests/test_vector_width.cpp).
//
// One 16-byte access (LDG.128/STG.128) moves vector_width(elem) elements: 4 f32, 8 f16/bf16. A
// vector load faults on a pointer that is not 16-byte aligned, and a tensor's data pointer is not
// when it is a view at an odd offset (a leading-dimension slice starting at row 1 of a [n] tensor,
// a .grad view packed into a bucket). A broadcast operand of `period` elements (a bias of length
// C) is read as whole vectors only when period is a multiple of the width, else a vector of x
// would straddle the end of the bias. The kernels (elementwise/cuda.cu, fused_bias/cuda.cu) take their
// scalar grid-stride loop whenever this says no; the < width tail of a vectorised map is done by
// scalar code in the same launch, so numel need not be a multiple of the width.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tandem::cuda {

// Elements per 16-byte access; 0 for elements wider than 16 bytes (never vectorised).
constexpr int64_t vector_width(size_t elem_bytes) {
  return elem_bytes == 0 || elem_bytes > 16 ? 0 : static_cast<int64_t>(16 / elem_bytes);
}

// True for a 16-byte aligned pointer, and for nullptr: an absent operand never blocks the vector path.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The vector path is legal for these operands: every pointer 16-byte aligned and, when an operand
// repeats with `period` elements (0: nothing is broadcast), period a multiple of the width.
inline bool vector_path_ok(std::initializer_list<const void*> ptrs, size_t elem_bytes, int64_t period = 0) {
  const int64_t w = vector_width(elem_bytes);
  if (w == 0 || 16 % elem_bytes != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return period == 0 || period % w == 0;
}

}  // namespace tandem::cuda
