// core/ops/cuda/elementwise.cu: CUDA kernels over the shared functors (core/ops/functors.h).
// Loads widen to float, the functor runs in float, stores narrow to the tensor's dtype.
#include "core/ops/cuda/dispatch.cuh"
#include "core/ops/functors.h"
#include "core/ops/elementwise_visit.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

template <typename T, typename F>
__global__ void map1_kernel(const T* x, T* y, long long n, F f) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = from_float<T>(f(to_float(x[i])));
}

template <typename T, typename F>
__global__ void map2_kernel(const T* a, const T* b, T* y, long long n, long long nb, F f) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = from_float<T>(f(to_float(a[i]), to_float(b[nb == n ? i : i % nb])));
}

template <typename T, typename F>
void map1(const Tensor& x, Tensor& y, F f) {
  long long n = x.numel();
  if (n == 0) return;
  map1_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(
      static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), n, f);
  CUDA_CHECK_LAUNCH();
}

template <typename T, typename F>
void map2(const Tensor& a, const Tensor& b, Tensor& y, F f) {
  long long n = a.numel();
  if (n == 0) return;
  map2_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(
      static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), static_cast<T*>(y.data_ptr()), n,
      (long long)b.numel(), f);
  CUDA_CHECK_LAUNCH();
}

// One thread per column, each summing its column in float: columns are channels (<= a few thousand)
// and rows are N*H*W, so this is bandwidth-bound and coalesced across the warp.
template <typename T>
__global__ void sum_leading_kernel(const T* src, T* dst, long long m, long long n) {
  long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (j >= n) return;
  float acc = 0.f;
  for (long long i = 0; i < m; ++i) acc += to_float(src[i * n + j]);
  dst[j] = from_float<T>(acc);
}

}  // namespace

void unary_cuda(Unary op, const Tensor& x, Tensor& y, float alpha) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] { visit_unary(op, alpha, [&](auto f) { map1<T>(x, y, f); }); });
}

void binary_cuda(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta) {
  TANDEM_CUDA_FLOAT_TYPES(a.dtype(), T, [&] { visit_binary(op, alpha, beta, [&](auto f) { map2<T>(a, b, y, f); }); });
}

void sum_leading_cuda(const Tensor& src, Tensor& dst) {
  TANDEM_CUDA_FLOAT_TYPES(src.dtype(), T, [&] {
    long long m = src.size(0), n = src.size(1);
    if (n == 0) return;
    sum_leading_kernel<<<(unsigned)((n + 255) / 256), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(src.data_ptr()), static_cast<T*>(dst.data_ptr()), m, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::kernels
