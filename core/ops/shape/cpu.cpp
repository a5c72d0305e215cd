// core/ops/shape/cpu.cpp: CPU copies for concat_channels and transpose12 (any dtype: raw bytes).
#include <cstring>

#include "core/ops/shape/kernels.h"

namespace tandem::kernels {

void copy_columns_cpu(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width) {
  const size_t es = dtype_size(src.dtype());
  const int64_t rows = src.size(0), sc = src.size(1), dc = dst.size(1);
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(dst.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + (r * dc + dst_col) * es, s + (r * sc + src_col) * es, static_cast<size_t>(width) * es);
}

void transpose12_cpu(const Tensor& x, Tensor& y) {
  // Rows of D elements stay contiguous, so each (a, b, c) moves one memcpy.
  const size_t es = dtype_size(x.dtype());
  const int64_t A = x.size(0), B = x.size(1), C = x.size(2), D = x.size(3);
  const size_t row = static_cast<size_t>(D) * es;
  const char* s = static_cast<const char*>(x.data_ptr());
  char* d = static_cast<char*>(y.data_ptr());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        std::memcpy(d + (((a * C + c) * B + b) * D) * es, s + (((a * B + b) * C + c) * D) * es, row);
}

}  // namespace tandem::kernels
