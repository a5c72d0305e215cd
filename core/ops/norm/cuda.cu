// core/ops/norm/cuda.cu: layer normalisation on CUDA.
//
// Forward and dx: one warp per row (rows = tokens, D = 128..4096 features), two passes over the row
// for the statistics as on the CPU, all in f32. The row is re-read from global memory on each pass;
// at these sizes it sits in L1/L2, and keeping it out of registers lets one kernel serve any D.
// dweight/dbias are column sums over all rows. They are computed deterministically (no atomics) in
// two steps: blocks of 32 columns x kRowLanes row lanes each sum one chunk of rows into an f32
// partial [chunks, D], then one thread per column adds its chunks in order and casts.
#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/norm/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kWarpsPerBlock = 8;
constexpr int kRowLanes = 8;      // threadIdx.y of the column-sum kernel
constexpr int kMaxChunks = 256;   // enough blocks to fill an H100 (132 SMs) for any D

unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T>
__global__ void ln_fwd_kernel(const T* x, const T* w, const T* b, long long m, long long d, float eps, T* y,
                              float* mean, float* rstd) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= m) return;  // whole warps exit together
  const T* r = x + row * d;
  float mu = 0.f;
  for (long long j = lane; j < d; j += 32) mu += to_float(r[j]);
  mu = cuda::warp_sum(mu) / (float)d;
  float var = 0.f;
  for (long long j = lane; j < d; j += 32) {
    float c = to_float(r[j]) - mu;
    var += c * c;
  }
  var = cuda::warp_sum(var) / (float)d;
  float rs = rsqrtf(var + eps);
  for (long long j = lane; j < d; j += 32)
    y[row * d + j] = from_float<T>((to_float(r[j]) - mu) * rs * to_float(w[j]) + to_float(b[j]));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void ln_bwd_dx_kernel(const T* dy, const T* x, const T* w, const float* mean, const float* rstd,
                                 long long m, long long d, T* dx) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= m) return;
  const T* r = x + row * d;
  const T* g = dy + row * d;
  float mu = mean[row], rs = rstd[row], a = 0.f, c = 0.f;
  for (long long j = lane; j < d; j += 32) {
    float gw = to_float(g[j]) * to_float(w[j]);
    a += gw;
    c += gw * (to_float(r[j]) - mu) * rs;
  }
  a = cuda::warp_sum(a) / (float)d;
  c = cuda::warp_sum(c) / (float)d;
  for (long long j = lane; j < d; j += 32) {
    float xhat = (to_float(r[j]) - mu) * rs;
    dx[row * d + j] = from_float<T>(rs * (to_float(g[j]) * to_float(w[j]) - a - xhat * c));
  }
}

// grid (ceil(D/32), chunks), block (32, kRowLanes). Writes pw/pb[chunk * d + col].
template <typename T>
__global__ void ln_bwd_partial_kernel(const T* dy, const T* x, const float* mean, const float* rstd, long long m,
                                      long long d, long long rows_per_chunk, float* pw, float* pb) {
  long long col = blockIdx.x * 32LL + threadIdx.x;
  long long start = blockIdx.y * rows_per_chunk;
  long long end = min(m, start + rows_per_chunk);
  float aw = 0.f, ab = 0.f;
  if (col < d) {
    for (long long i = start + threadIdx.y; i < end; i += kRowLanes) {
      float g = to_float(dy[i * d + col]);
      aw += g * (to_float(x[i * d + col]) - mean[i]) * rstd[i];
      ab += g;
    }
  }
  cuda::column_sum2<32, kRowLanes>(aw, ab);
  if (threadIdx.y == 0 && col < d) {
    pw[blockIdx.y * d + col] = aw;
    pb[blockIdx.y * d + col] = ab;
  }
}

template <typename T>
__global__ void ln_bwd_finish_kernel(const float* pw, const float* pb, long long chunks, long long d, T* dw, T* db) {
  long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (col >= d) return;
  float aw = 0.f, ab = 0.f;
  for (long long k = 0; k < chunks; ++k) {
    aw += pw[k * d + col];
    ab += pb[k * d + col];
  }
  dw[col] = from_float<T>(aw);
  db[col] = from_float<T>(ab);
}

}  // namespace

void layer_norm_fwd_cuda(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                         Tensor& rstd) {
  long long m = x.size(0), d = x.size(1);
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    ln_fwd_kernel<<<row_blocks(m), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<const T*>(b.data_ptr()),
        m, d, static_cast<float>(eps), static_cast<T*>(y.data_ptr()), mean.data<float>(), rstd.data<float>());
    CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_bwd_cuda(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         Tensor& dx, Tensor& dw, Tensor& db) {
  long long m = x.size(0), d = x.size(1);
  // At least 64 rows per chunk so each partial amortises its write; at most kMaxChunks partials.
  long long chunks = (m + 63) / 64;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  long long rows_per_chunk = (m + chunks - 1) / chunks;
  Tensor pw = Tensor::empty({chunks, d}, DType::F32, x.device());
  Tensor pb = Tensor::empty({chunks, d}, DType::F32, x.device());
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pdy = static_cast<const T*>(dy.data_ptr());
    ln_bwd_dx_kernel<<<row_blocks(m), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
        pdy, px, static_cast<const T*>(w.data_ptr()), mean.data<float>(), rstd.data<float>(), m, d,
        static_cast<T*>(dx.data_ptr()));
    CUDA_CHECK_LAUNCH();
    dim3 grid(static_cast<unsigned>((d + 31) / 32), static_cast<unsigned>(chunks));
    ln_bwd_partial_kernel<<<grid, dim3(32, kRowLanes), 0, cuda::compute_stream()>>>(
        pdy, px, mean.data<float>(), rstd.data<float>(), m, d, rows_per_chunk, pw.data<float>(), pb.data<float>());
    CUDA_CHECK_LAUNCH();
    ln_bwd_finish_kernel<<<static_cast<unsigned>((d + 255) / 256), 256, 0, cuda::compute_stream()>>>(
        pw.data<float>(), pb.data<float>(), chunks, d, static_cast<T*>(dw.data_ptr()), static_cast<T*>(db.data_ptr()));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::kernels
