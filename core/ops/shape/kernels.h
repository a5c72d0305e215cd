// core/ops/shape/kernels.h: backend entry points for the copying shape ops (internal).
//
// Both kernels move raw elements and never look at values, so they take every dtype (floats,
// 16-bit floats, integers) on both backends.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

// Copies a block of columns between two row-major [rows, *] matrices that share the row count:
// dst[r, dst_col + j] = src[r, src_col + j] for j < width. concat_channels uses it forward (each
// input into its slot) and backward (each slot out of the gradient).
void copy_columns_cpu(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width);
// y[a, c, b, d] = x[a, b, c, d] for x of shape [A, B, C, D].
void transpose12_cpu(const Tensor& x, Tensor& y);
#ifdef TANDEM_WITH_CUDA
void copy_columns_cuda(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width);
void transpose12_cuda(const Tensor& x, Tensor& y);
#endif

}  // namespace tandem::kernels
