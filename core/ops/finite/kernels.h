// core/ops/finite/kernels.h: backend entry points for the inf/NaN count (internal).
//
// The op layer (core/ops/finite/finite.cpp) skips undefined, empty and integer tensors, groups the rest by
// dtype and checks their device; these functions only count. Every span of one call has `dtype`
// (f16, bf16, f32 or f64); a span is a contiguous run of `numel` elements starting at `data`.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tandem::kernels {

struct FiniteSpan {
  const void* data;
  int64_t numel;
};

// count[0] += the number of inf/NaN elements over the spans; count is host memory.
void count_nonfinite_cpu(DType dtype, const std::vector<FiniteSpan>& spans, int64_t* count);
#ifdef TANDEM_WITH_CUDA
// The same on `device`'s compute stream; count is device memory (an i64 [1] tensor). No sync.
void count_nonfinite_cuda(DType dtype, int device, const std::vector<FiniteSpan>& spans, int64_t* count);
#endif

}  // namespace tandem::kernels
