// core/ops/shape/cuda.cu: CUDA copies for concat_channels and transpose12 (any dtype).
//
// copy_columns is a pitched 2-D copy, which cudaMemcpy2DAsync does at full bandwidth. transpose12
// moves whole elements as 2-, 4- or 8-byte words (the kernel never interprets values), one thread
// per element with the D (head-dim) index fastest so reads and writes are both coalesced rows.
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/shape/kernels.h"

namespace tandem::kernels {
namespace {

template <typename W>
__global__ void transpose12_kernel(const W* x, W* y, long long B, long long C, long long D, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    // i indexes y = [A, C, B, D].
    long long d = i % D;
    long long r = i / D;
    long long b = r % B;
    r /= B;
    long long c = r % C;
    long long a = r / C;
    y[i] = x[((a * B + b) * C + c) * D + d];
  }
}

}  // namespace

void copy_columns_cuda(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width) {
  const size_t es = dtype_size(src.dtype());
  const int64_t rows = src.size(0);
  if (rows == 0 || width == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.data_ptr()) + dst_col * es, dst.size(1) * es,
                               static_cast<const char*>(src.data_ptr()) + src_col * es, src.size(1) * es,
                               width * es, rows, cudaMemcpyDeviceToDevice, cuda::compute_stream()),
             "concat_channels copy");
}

void transpose12_cuda(const Tensor& x, Tensor& y) {
  long long total = x.numel();
  if (total == 0) return;
  long long B = x.size(1), C = x.size(2), D = x.size(3);
  auto launch = [&](auto word) {
    using W = decltype(word);
    transpose12_kernel<W><<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(
        static_cast<const W*>(x.data_ptr()), static_cast<W*>(y.data_ptr()), B, C, D, total);
    CUDA_CHECK_LAUNCH("transpose12");
  };
  switch (dtype_size(x.dtype())) {
    case 2: launch(uint16_t{}); break;
    case 4: launch(uint32_t{}); break;
    case 8: launch(uint64_t{}); break;
    default: TANDEM_THROW("transpose12: unsupported element size ", dtype_size(x.dtype()), " for ", x.str());
  }
}

}  // namespace tandem::kernels
