// core/ops/reduce/cuda.cu: sum to a scalar and its broadcast backward on CUDA.
//
// Two kernels, no atomics: a grid-stride pass where each of at most kMaxBlocks blocks writes one
// f32 partial, then a single block that adds the partials in order, scales and rounds to x's
// dtype. The number of blocks depends only on numel, so the result is bit-reproducible.
// The backward reads the scalar gradient on the device, so it never syncs with the host.
#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/reduce/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kThreads = 256;
constexpr long long kMaxBlocks = 1024;  // ~8 blocks per SM on an H100: enough to saturate bandwidth

template <typename T>
__global__ void partial_sum_kernel(const T* x, long long n, float* partial) {
  __shared__ float scratch[32];
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += to_float(x[i]);
  acc = cuda::block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T>
__global__ void finish_sum_kernel(const float* partial, long long parts, float scale, T* out) {
  __shared__ float scratch[32];
  float acc = 0.f;
  for (long long i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = cuda::block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = from_float<T>(acc * scale);
}

template <typename T>
__global__ void broadcast_kernel(const T* g, float scale, long long n, T* dx) {
  T v = from_float<T>(to_float(g[0]) * scale);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dx[i] = v;
}

}  // namespace

void sum_cuda(const Tensor& x, double scale, Tensor& out) {
  long long n = x.numel();
  long long blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;  // an empty x still gets a partial (0) so out is written
  Tensor partial = Tensor::empty({blocks}, DType::F32, x.device());
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    partial_sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(x.data_ptr()), n, partial.data<float>());
    CUDA_CHECK_LAUNCH();
    finish_sum_kernel<<<1, 1024, 0, cuda::compute_stream()>>>(partial.data<float>(), blocks,
                                                              static_cast<float>(scale),
                                                              static_cast<T*>(out.data_ptr()));
    CUDA_CHECK_LAUNCH();
  });
}

void broadcast_scalar_cuda(const Tensor& g, double scale, Tensor& dx) {
  long long n = dx.numel();
  if (n == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dx.dtype(), T, [&] {
    broadcast_kernel<<<cuda::grid_for(n), kThreads, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(g.data_ptr()), static_cast<float>(scale), n, static_cast<T*>(dx.data_ptr()));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::kernels
