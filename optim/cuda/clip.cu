// optim/cuda/clip.cu: multi-tensor sum of squares and scaling for gradient-norm clipping.
//
// sum_squares_cuda: one launch sums each chunk's squares into a partial (block per chunk, as the
// fused optimizers), a second launch of ONE block adds the partials in a fixed order, and the single
// f32 total is copied back: the only host sync of clip_grad_norm. No atomics, so the norm is
// deterministic. The chunk table is built per call (clipping runs once per step; the upload is a
// few KiB) rather than cached, so this stays a free function.
// GradClipper's launches (the capturable form, optim/clip.h) run the same two reduction kernels
// into a device float, then two one-thread kernels (the f64 sum of the per-dtype totals, and the
// norm and coefficient), and scale by the coefficient read from device memory; their chunk tables
// are cached in the GradClipper.
#include "core/ops/common/cuda/block_reduce.cuh"
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

// coef: null for the eager form (scale given); else read here, and >= 1 leaves the tensors alone.
template <typename T>
__global__ void scale_kernel(const GradChunk* __restrict__ chunks, float scale, const float* __restrict__ coef) {
  if (coef && !(*coef < 1.f)) return;  // uniform over the grid
  const float s = coef ? *coef : scale;
  const GradChunk c = chunks[blockIdx.x];
  T* g = static_cast<T*>(c.data) + c.start;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) g[i] = cuda::from_float<T>(cuda::to_float(g[i]) * s);
}

__global__ void sum_totals_kernel(const float* __restrict__ totals, int n, float* __restrict__ sum_sq) {
  double acc = 0.0;  // the host code's f64 accumulation over the per-dtype totals
  for (int g = 0; g < n; ++g) acc = __dadd_rn(acc, static_cast<double>(totals[g]));
  *sum_sq = __double2float_rn(acc);
}

__global__ void clip_coefficient_kernel(const float* __restrict__ sum_sq, double max_norm, float* __restrict__ norm,
                                        float* __restrict__ coef) {
  // optim/clip.cpp's expressions, each operation rounded as the host rounds it.
  const double total = __dsqrt_rn(static_cast<double>(*sum_sq));
  const double scale = __ddiv_rn(max_norm, __dadd_rn(total, 1e-6));
  *norm = __double2float_rn(total);
  *coef = isfinite(total) && scale < 1.0 ? __double2float_rn(scale) : 1.f;
}

std::vector<GradChunk> grad_chunks(const std::vector<GradTensor>& ts) {
  std::vector<GradChunk> out;
  for (const auto& t : ts) for_each_chunk(t.numel, [&](int64_t s, int32_t len) { out.push_back({t.data, s, len}); });
  return out;
}

// The two reduction launches over n chunks, total into *out (device). The partials are allocated
// and freed on the stream: inside a capture, graph memory that every replay reuses.
void launch_sum_squares(DType dtype, int device, const GradChunk* chunks, int64_t n, float* out) {
  cudaStream_t stream = cuda::compute_stream(device);
  float* partials = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), n * sizeof(float), stream),
             "allocating the gradient-norm partials");
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    sum_squares_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(chunks, partials);
    CUDA_CHECK_LAUNCH("gradient sum of squares");
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(partials, n, out);
  CUDA_CHECK_LAUNCH("gradient sum of squares (total)");
  CUDA_CHECK(cudaFreeAsync(partials, stream));
}

}  // namespace

double sum_squares_cuda(DType dtype, int device, const std::vector<GradTensor>& ts) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) return 0.0;
  const int64_t n = static_cast<int64_t>(host.size());
  check_grid(n, "clip_grad_norm");
  DeviceTable table;  // freed (stream-ordered) when this returns, after the kernels below
  const GradChunk* chunks = table.get(device, host, "clip_grad_norm");
  cudaStream_t stream = cuda::compute_stream(device);
  float* total_dev = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&total_dev), sizeof(float), stream),
             "allocating the gradient-norm total");
  launch_sum_squares(dtype, device, chunks, n, total_dev);
  float total = 0.f;
  CUDA_CHECK(cudaMemcpyAsync(&total, total_dev, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(total_dev, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream), "reading the gradient norm");
  return static_cast<double>(total);
}

void scale_cuda(DType dtype, int device, const std::vector<GradTensor>& ts, float scale) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) return;
  check_grid(static_cast<int64_t>(host.size()), "clip_grad_norm");
  DeviceTable table;
  const GradChunk* chunks = table.get(device, host, "clip_grad_norm");
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    scale_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, scale, nullptr);
    CUDA_CHECK_LAUNCH("gradient scaling");
  });
}

void sum_squares_to_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device,
                         const std::vector<GradTensor>& ts, float* total) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) {
    CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(float), cuda::compute_stream(device)));
    return;
  }
  const int64_t n = static_cast<int64_t>(host.size());
  check_grid(n, "GradClipper");
  if (!table) table = std::make_shared<DeviceTable>();
  launch_sum_squares(dtype, device, table->get(device, host, "GradClipper"), n, total);
}

void sum_totals_cuda(int device, const float* totals, int n, float* sum_sq) {
  sum_totals_kernel<<<1, 1, 0, cuda::compute_stream(device)>>>(totals, n, sum_sq);
  CUDA_CHECK_LAUNCH("gradient sum of squares (dtypes)");
}

void clip_coefficient_cuda(int device, const float* sum_sq, double max_norm, float* norm, float* coef) {
  clip_coefficient_kernel<<<1, 1, 0, cuda::compute_stream(device)>>>(sum_sq, max_norm, norm, coef);
  CUDA_CHECK_LAUNCH("gradient clipping coefficient");
}

void scale_by_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device, const std::vector<GradTensor>& ts,
                   const float* coef) {
  const std::vector<GradChunk> host = grad_chunks(ts);
  if (host.empty()) return;
  check_grid(static_cast<int64_t>(host.size()), "GradClipper");
  if (!table) table = std::make_shared<DeviceTable>();
  const GradChunk* chunks = table->get(device, host, "GradClipper");
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    scale_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, cuda::compute_stream(device)>>>(chunks, 1.f,
                                                                                                        coef);
    CUDA_CHECK_LAUNCH("gradient scaling (device coefficient)");
  });
}

}  // namespace tandem::optim::kernels
