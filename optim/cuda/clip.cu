// optim/cuda/clip.cu: multi-tensor sum of squares and scaling for gradient-norm clipping.
//
// sum_squares_cuda: one launch sums each chunk's squares into a partial (block per chunk, as the
// fused optimizers), a second launch of ONE block adds the partials in a fixed order, and the single
// f32 total is copied back: the only host sync of clip_grad_norm. No atomics, so the norm is
// deterministic. The chunk table is built per call (clipping runs once per step; the upload is a
// few KiB) rather than cached, so this stays a free function.
#include "core/ops/cuda/block_reduce.cuh"
#include "optim/cuda/multi_tensor.cuh"
#include "optim/kernels/clip.h"

namespace tandem::optim::kernels {
namespace {

struct GradChunk {  // 24 bytes, no padding
  void* data;
  int64_t start;
  int64_t len;
};

template <typename T>
__global__ void sum_squares_kernel(const GradChunk* __restrict__ chunks, float* __restrict__ partials) {
  __shared__ float scratch[32];
  const GradChunk c = chunks[blockIdx.x];
  const T* g = static_cast<const T*>(c.data) + c.start;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float x = cuda::to_float(g[i]);
    s += x * x;
  }
  s = cuda::block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const float* __restrict__ partials, int64_t n, float* __restrict__ out) {
  __shared__ float scratch[32];
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partials[i];
  s = cuda::block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

template <typename T>
__global__ void scale_kernel(const GradChunk* __restrict__ chunks, float scale) {
  const GradChunk c = chunks[blockIdx.x];
  T* g = static_cast<T*>(c.data) + c.start;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) g[i] = cuda::from_float<T>(cuda::to_float(g[i]) * scale);
}

std::vector<GradChunk> grad_chunks(const std::vector<GradTensor>& ts) {
  std::vector<GradChunk> out;
  for (const auto& t : ts) for_each_chunk(t.numel, [&](int64_t s, int32_t len) { out.push_back({t.data, s, len}); });
  return out;
}

}  // namespace

double sum_squares_cuda(DType dtype, int device, const std::vector<GradTensor>& ts) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) return 0.0;
  const int64_t n = static_cast<int64_t>(host.size());
  check_grid(n, "clip_grad_norm");
  DeviceTable table;  // freed (stream-ordered) when this returns, after the kernels below
  const GradChunk* chunks = table.get(device, host);
  cudaStream_t stream = cuda::compute_stream(device);
  float* scratch = nullptr;  // n partials, then the total
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), (n + 1) * sizeof(float), stream),
             "allocating the gradient-norm partials");
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    sum_squares_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(chunks, scratch);
    CUDA_CHECK_LAUNCH("gradient sum of squares");
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(scratch, n, scratch + n);
  CUDA_CHECK_LAUNCH("gradient sum of squares (total)");
  float total = 0.f;
  CUDA_CHECK(cudaMemcpyAsync(&total, scratch + n, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(scratch, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream), "reading the gradient norm");
  return static_cast<double>(total);
}

void scale_cuda(DType dtype, int device, const std::vector<GradTensor>& ts, float scale) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) return;
  check_grid(static_cast<int64_t>(host.size()), "clip_grad_norm");
  DeviceTable table;
  const GradChunk* chunks = table.get(device, host);
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    scale_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, scale);
    CUDA_CHECK_LAUNCH("gradient scaling");
  });
}

}  // namespace tandem::optim::kernels
