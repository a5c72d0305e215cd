// core/ops/copy/cuda.cu: casts between CUDA dtypes (f32, f16, bf16, i32, i64) and fills.
#include <cstdint>
#include <utility>

#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/dispatch.h"
#include "core/ops/copy/kernels.h"

namespace tandem::kernels {
namespace {

template <typename T> __device__ __forceinline__ float widen(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T narrow(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename S, typename D>
__global__ void cast_kernel(const S* s, D* d, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    if constexpr (std::is_integral_v<S> && std::is_integral_v<D>)
      d[i] = static_cast<D>(s[i]);  // integer to integer must not pass through float
    else
      d[i] = narrow<D>(widen(s[i]));
  }
}

template <typename D>
__global__ void fill_kernel(D* d, D v, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    d[i] = v;
}

template <typename F>
void by_dtype(DType t, F&& f) {
  with_element_type<__half, __nv_bfloat16, /*kHasF64=*/false>(t, std::forward<F>(f));
}

}  // namespace

void cast_cuda(const Tensor& x, Tensor& y) {
  long long n = x.numel();
  if (n == 0) return;
  by_dtype(x.dtype(), [&](auto s) {
    by_dtype(y.dtype(), [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      cast_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(static_cast<const S*>(x.data_ptr()),
                                                                          static_cast<D*>(y.data_ptr()), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void fill_cuda(Tensor& t, double value) {
  long long n = t.numel();
  if (n == 0) return;
  by_dtype(t.dtype(), [&](auto tag) {
    using D = decltype(tag);
    D v;
    if constexpr (std::is_same_v<D, __half>) v = __float2half_rn(static_cast<float>(value));
    else if constexpr (std::is_same_v<D, __nv_bfloat16>) v = __float2bfloat16_rn(static_cast<float>(value));
    else v = static_cast<D>(value);
    fill_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(static_cast<D*>(t.data_ptr()), v, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::kernels
