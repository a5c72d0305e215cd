// core/ops/batchnorm/cuda.cu: CUDA batch norm on [M, C] (NHWC flattened), hand-written kernels.
//
// Why not cuDNN: BN here is three bandwidth-bound passes (per-channel reduction, finalisation,
// elementwise), and a channels-last per-channel reduction is a short, readable kernel. Writing it
// keeps one code path for f32/f16/bf16 with f32 parameters, [N, C] and [N, H, W, C] alike, lets the
// saved statistics follow our contract exactly (biased var to normalise, unbiased in running_var),
// and avoids cuDNN's NHWC BN mode restrictions (per-dtype support, workspace and reserve-space
// plumbing). Fusing BN into neighbouring kernels is a later optimisation, not attempted here.
//
// Reduction layout: grid (ceil(C / 32), R), block (32, 8). threadIdx.x picks a channel, so a warp
// reads 32 consecutive channels of one row (coalesced); threadIdx.y and blockIdx.y split the M rows
// into R chunks. Each block reduces its chunk into one partial per channel; a second tiny kernel
// (one thread per channel) combines the R partials in a fixed order, so results are deterministic
// (no atomics). Statistics use Welford/Chan updates in f32 (numerically stable without f64);
// gradient sums are plain f32 sums.
#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/column_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/batchnorm/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kTx = cuda::kColTx;  // channels per block: one warp-wide row segment
constexpr int kTy = cuda::kColTy;  // row lanes per block

// Merges Welford state (nb, mb, m2b) into (n, m, m2) (Chan et al.'s parallel update).
__device__ __forceinline__ void chan_merge(float& n, float& m, float& m2, float nb, float mb, float m2b) {
  if (nb == 0.f) return;
  float nn = n + nb;
  float delta = mb - m;
  m += delta * (nb / nn);
  m2 += m2b + delta * delta * (n * nb / nn);
  n = nn;
}

template <typename T>
__global__ void partial_stats_kernel(const T* x, long long M, int C, long long rpc, float* pn, float* pmean, float* pm2) {
  __shared__ float sn[kTy][kTx], sm[kTy][kTx], sm2[kTy][kTx];
  int c = blockIdx.x * kTx + threadIdx.x;
  long long r0 = blockIdx.y * rpc, r1 = min(M, r0 + rpc);
  float n = 0.f, m = 0.f, m2 = 0.f;
  if (c < C)
    for (long long r = r0 + threadIdx.y; r < r1; r += kTy) {
      float v = to_float(x[r * C + c]);
      n += 1.f;
      float d = v - m;
      m += d / n;
      m2 += d * (v - m);
    }
  sn[threadIdx.y][threadIdx.x] = n;
  sm[threadIdx.y][threadIdx.x] = m;
  sm2[threadIdx.y][threadIdx.x] = m2;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kTy; ++k) chan_merge(n, m, m2, sn[k][threadIdx.x], sm[k][threadIdx.x], sm2[k][threadIdx.x]);
    long long o = blockIdx.y * (long long)C + c;
    pn[o] = n;
    pmean[o] = m;
    pm2[o] = m2;
  }
}

// One thread per channel: merge the R partials, save mean / invstd, update the running stats.
__global__ void finalize_stats_kernel(const float* pn, const float* pmean, const float* pm2, int R, int C, long long M,
                                      float eps, float momentum, float* save_mean, float* save_invstd, float* rm,
                                      float* rv) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float n = 0.f, m = 0.f, m2 = 0.f;
  for (int r = 0; r < R; ++r) chan_merge(n, m, m2, pn[r * (long long)C + c], pmean[r * (long long)C + c], pm2[r * (long long)C + c]);
  float var = m2 / static_cast<float>(M);  // biased: normalises this batch
  save_mean[c] = m;
  save_invstd[c] = rsqrtf(var + eps);
  if (rm) {
    float unbiased = m2 / static_cast<float>(M - 1);
    rm[c] = (1.f - momentum) * rm[c] + momentum * m;
    rv[c] = (1.f - momentum) * rv[c] + momentum * unbiased;
  }
}

__global__ void eval_stats_kernel(const float* rm, const float* rv, int C, float eps, float* save_mean, float* save_invstd) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  save_mean[c] = rm[c];
  save_invstd[c] = rsqrtf(rv[c] + eps);
}

template <typename T>
__global__ void apply_kernel(const T* x, T* y, long long total, int C, const float* mean, const float* invstd,
                             const float* w, const float* b) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % C);
    float v = (to_float(x[i]) - mean[c]) * invstd[c];
    y[i] = from_float<T>(v * (w ? w[c] : 1.f) + (b ? b[c] : 0.f));
  }
}

template <typename T>
__global__ void partial_grad_kernel(const T* dy, const T* x, long long M, int C, long long rpc, const float* mean,
                                    const float* invstd, float* psum_dy, float* psum_dyx) {
  int c = blockIdx.x * kTx + threadIdx.x;
  long long r0 = blockIdx.y * rpc, r1 = min(M, r0 + rpc);
  float a = 0.f, bsum = 0.f;
  if (c < C) {
    float mu = mean[c], is = invstd[c];
    for (long long r = r0 + threadIdx.y; r < r1; r += kTy) {
      float g = to_float(dy[r * C + c]);
      a += g;
      bsum += g * (to_float(x[r * C + c]) - mu) * is;
    }
  }
  cuda::column_sum2<kTx, kTy>(a, bsum);
  if (threadIdx.y == 0 && c < C) {
    psum_dy[blockIdx.y * (long long)C + c] = a;
    psum_dyx[blockIdx.y * (long long)C + c] = bsum;
  }
}

// One thread per channel: total the R partials into sum_dy / sum_dy_xhat (and dbias / dweight).
__global__ void finalize_grad_kernel(const float* psum_dy, const float* psum_dyx, int R, int C, float* sum_dy,
                                     float* sum_dyx, float* dweight, float* dbias) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.f, bsum = 0.f;
  for (int r = 0; r < R; ++r) {
    a += psum_dy[r * (long long)C + c];
    bsum += psum_dyx[r * (long long)C + c];
  }
  sum_dy[c] = a;
  sum_dyx[c] = bsum;
  if (dbias) dbias[c] = a;
  if (dweight) dweight[c] = bsum;
}

template <typename T>
__global__ void dx_kernel(const T* dy, const T* x, T* dx, long long total, long long M, int C, const float* mean,
                          const float* invstd, const float* w, const float* sum_dy, const float* sum_dyx, bool training) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % C);
    float k = (w ? w[c] : 1.f) * invstd[c];
    float g = to_float(dy[i]);
    if (training) {
      float xhat = (to_float(x[i]) - mean[c]) * invstd[c];
      const float inv_m = 1.f / static_cast<float>(M);
      g = g - sum_dy[c] * inv_m - xhat * sum_dyx[c] * inv_m;
    }
    dx[i] = from_float<T>(k * g);
  }
}

const float* fptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* fptr_mut(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
unsigned channel_blocks(int C) { return static_cast<unsigned>((C + 255) / 256); }

}  // namespace

void batchnorm_forward_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                            Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                            Tensor& save_mean, Tensor& save_invstd) {
  const long long M = x.size(0);
  const int C = static_cast<int>(x.size(1));
  if (C == 0) return;
  cudaStream_t s = cuda::compute_stream();
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    if (training) {
      cuda::ColumnChunks ch = cuda::plan_column_chunks(M, C);
      Tensor pn = Tensor::empty({ch.count, C}, DType::F32, x.device());
      Tensor pmean = Tensor::empty({ch.count, C}, DType::F32, x.device());
      Tensor pm2 = Tensor::empty({ch.count, C}, DType::F32, x.device());
      dim3 grid(static_cast<unsigned>((C + kTx - 1) / kTx), static_cast<unsigned>(ch.count));
      partial_stats_kernel<T><<<grid, dim3(kTx, kTy), 0, s>>>(static_cast<const T*>(x.data_ptr()), M, C,
                                                               ch.rows_per_chunk, pn.data<float>(),
                                                               pmean.data<float>(), pm2.data<float>());
      CUDA_CHECK_LAUNCH("batch_norm statistics");
      finalize_stats_kernel<<<channel_blocks(C), 256, 0, s>>>(
          pn.data<float>(), pmean.data<float>(), pm2.data<float>(), ch.count, C, M, static_cast<float>(eps),
          static_cast<float>(momentum), save_mean.data<float>(), save_invstd.data<float>(), fptr_mut(running_mean),
          fptr_mut(running_var));
      CUDA_CHECK_LAUNCH("batch_norm statistics finalisation");
    } else {
      eval_stats_kernel<<<channel_blocks(C), 256, 0, s>>>(running_mean.data<float>(), running_var.data<float>(), C,
                                                          static_cast<float>(eps), save_mean.data<float>(),
                                                          save_invstd.data<float>());
      CUDA_CHECK_LAUNCH("batch_norm eval statistics");
    }
    long long total = M * C;
    if (total == 0) return;
    apply_kernel<T><<<cuda::grid_for(total), 256, 0, s>>>(static_cast<const T*>(x.data_ptr()),
                                                          static_cast<T*>(y.data_ptr()), total, C,
                                                          save_mean.data<float>(), save_invstd.data<float>(),
                                                          fptr(weight), fptr(bias));
    CUDA_CHECK_LAUNCH("batch_norm normalisation");
  });
}

void batchnorm_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                             const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const long long M = x.size(0);
  const int C = static_cast<int>(x.size(1));
  if (C == 0) return;
  cudaStream_t s = cuda::compute_stream();
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    Tensor sum_dy, sum_dyx;
    if (training || dweight.defined() || dbias.defined()) {
      cuda::ColumnChunks ch = cuda::plan_column_chunks(M, C);
      Tensor p1 = Tensor::empty({ch.count, C}, DType::F32, x.device());
      Tensor p2 = Tensor::empty({ch.count, C}, DType::F32, x.device());
      dim3 grid(static_cast<unsigned>((C + kTx - 1) / kTx), static_cast<unsigned>(ch.count));
      partial_grad_kernel<T><<<grid, dim3(kTx, kTy), 0, s>>>(
          static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()), M, C, ch.rows_per_chunk,
          save_mean.data<float>(), save_invstd.data<float>(), p1.data<float>(), p2.data<float>());
      CUDA_CHECK_LAUNCH("batch_norm backward reduction");
      sum_dy = Tensor::empty({C}, DType::F32, x.device());
      sum_dyx = Tensor::empty({C}, DType::F32, x.device());
      finalize_grad_kernel<<<channel_blocks(C), 256, 0, s>>>(p1.data<float>(), p2.data<float>(), ch.count, C,
                                                             sum_dy.data<float>(), sum_dyx.data<float>(),
                                                             fptr_mut(dweight), fptr_mut(dbias));
      CUDA_CHECK_LAUNCH("batch_norm backward finalisation");
    }
    long long total = M * C;
    if (!dx.defined() || total == 0) return;
    dx_kernel<T><<<cuda::grid_for(total), 256, 0, s>>>(
        static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()), static_cast<T*>(dx.data_ptr()),
        total, M, C, save_mean.data<float>(), save_invstd.data<float>(), fptr(weight), fptr(sum_dy), fptr(sum_dyx),
        training);
    CUDA_CHECK_LAUNCH("batch_norm backward dx");
  });
}

}  // namespace tandem::kernels
