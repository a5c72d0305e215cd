// core/ops/norm/cuda.cu: layer normalisation on CUDA.
//
// Two implementations, one semantics (the CPU reference's: mean, then the centred sum of squares,
// both in f32 here; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w):
//  - The register path (rows of D <= 1024 whose D is a multiple of the 16-byte vector width, every
//    pointer 16-byte aligned: BERT's 768/1024 in any dtype). One warp per row; each lane loads its
//    share of the row with 16-byte vector loads and keeps it in registers, so the forward reads x
//    once and writes y once, and the backward reads x and dy once and writes dx once. The backward
//    also accumulates dweight/dbias partials in registers over the rows its block owns (lane l
//    always owns the same columns), then sums its warps in warp order through shared memory into
//    one partial row per block: x and dy are not read a second time for the column sums.
//  - The generic path (any D, any alignment): one warp per row re-reading the row from L1/L2 for
//    each pass, and a separate column-sum kernel for the partials.
// Both write f32 partials [chunks, D]; one small kernel adds the chunks in a fixed order and casts.
// Deterministic (BackendConfig::deterministic holds for free): no atomics, and the chunking depends
// only on M, never on the device.
// Register budget of the register path: at most kMaxPerLane = 32 elements of a row per lane (the
// raw 16-byte vectors of x and dy plus 2 x 32 f32 partial sums in the backward), hence D <= 1024.
#include <algorithm>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/pack.cuh"
#include "core/ops/common/cuda/pack_width.h"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/norm/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kWarpsPerBlock = 8;
constexpr int kRowLanes = 8;      // threadIdx.y of the column-sum kernels
// Partial rows (blocks of the backward) at most: ~2 per SM of an H100 (132 SMs). The register
// backward at D = 1024 needs ~200 registers per thread, so one 256-thread block is resident per SM
// and 256 blocks run as two nearly full waves; smaller D fit two blocks per SM (one wave).
constexpr int kMaxChunks = 256;
constexpr int kMaxPerLane = 32;   // register path: row elements per lane
// Grid cap of the warp-per-row kernels: 4096 blocks x 8 warps is ~4 full waves of an H100 (132 SMs x
// 64 resident warps); past it warps loop over rows, and the weight/bias they hold in registers is
// reused instead of reloaded.
constexpr unsigned kMaxRowBlocks = 4096;

unsigned row_blocks(long long rows) {
  long long b = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(b < kMaxRowBlocks ? b : kMaxRowBlocks);
}

// ---- Register path ----
// A warp per row in the cuda::OwnedRow layout (pack.cuh) with 16-byte packs of V = kVec<T>
// elements; kSlots is the smallest power of two with kSlots * 32 * V >= D.
template <typename T, int kSlots>
using Row = cuda::OwnedRow<T, cuda::kVec<T>, kSlots>;

template <typename T, int kSlots>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    ln_fwd_reg_kernel(const T* x, const T* w, const T* b, long long m, long long d, float eps, T* y, float* mean,
                      float* rstd) {
  constexpr int V = cuda::kVec<T>;
  const int lane = threadIdx.x & 31, nvec = static_cast<int>(d / V);
  Row<T, kSlots> wr, br;  // weight and bias: loaded once per warp, reused for every row
  wr.load(w, nvec, lane);
  br.load(b, nvec, lane);
  for (long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5); row < m;
       row += (long long)gridDim.x * kWarpsPerBlock) {  // whole warps take the same rows
    Row<T, kSlots> xr;
    xr.load(x + row * d, nvec, lane);
    float sum = 0.f;
    cuda::each_owned<kSlots, V>(nvec, lane, [&](int c, int e) { sum += xr.at(c, e); });
    const float mu = cuda::warp_sum(sum) / (float)d;
    float var = 0.f;  // centred second pass, from registers: no E[x^2] - E[x]^2 cancellation
    cuda::each_owned<kSlots, V>(nvec, lane, [&](int c, int e) {
      const float t = xr.at(c, e) - mu;
      var += t * t;
    });
    const float rs = rsqrtf(cuda::warp_sum(var) / (float)d + eps);
    cuda::store_owned<kSlots, V>(y + row * d, nvec, lane,
                                 [&](int c, int e) { return (xr.at(c, e) - mu) * rs * wr.at(c, e) + br.at(c, e); });
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// Block blockIdx.x owns rows [blockIdx.x * rows_per_chunk, +rows_per_chunk); its warp w takes rows
// start + w, start + w + kWarpsPerBlock, ... Writes dx, and the block's dweight/dbias partial row
// pw/pb[blockIdx.x, :]. Dynamic shared memory: 2 * d floats.
template <typename T, int kSlots>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    ln_bwd_reg_kernel(const T* dy, const T* x, const T* w, const float* mean, const float* rstd, long long m, int d,
                      long long rows_per_chunk, T* dx, float* pw, float* pb) {
  constexpr int V = cuda::kVec<T>;
  extern __shared__ float colsum[];  // [2, d]: dweight then dbias partials of the block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nvec = d / V;
  Row<T, kSlots> wr;
  wr.load(w, nvec, lane);
  float aw[kSlots][V] = {}, ab[kSlots][V] = {};
  const long long start = blockIdx.x * rows_per_chunk;
  const long long end = min(m, start + rows_per_chunk);
  for (long long row = start + warp; row < end; row += kWarpsPerBlock) {
    Row<T, kSlots> xr, gr;
    xr.load(x + row * d, nvec, lane);
    gr.load(dy + row * d, nvec, lane);
    const float mu = mean[row], rs = rstd[row];
    float a = 0.f, cc = 0.f;  // sum(g w), sum(g w xhat)
    cuda::each_owned<kSlots, V>(nvec, lane, [&](int c, int e) {
      const float g = gr.at(c, e), xhat = (xr.at(c, e) - mu) * rs, gw = g * wr.at(c, e);
      a += gw;
      cc += gw * xhat;
      aw[c][e] += g * xhat;
      ab[c][e] += g;
    });
    a = cuda::warp_sum(a) / (float)d;
    cc = cuda::warp_sum(cc) / (float)d;
    cuda::store_owned<kSlots, V>(dx + row * d, nvec, lane, [&](int c, int e) {
      return rs * (gr.at(c, e) * wr.at(c, e) - a - (xr.at(c, e) - mu) * rs * cc);
    });
  }
  // The block's partial: warps add theirs in warp order (deterministic), one warp at a time.
  for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) colsum[j] = 0.f;
  __syncthreads();
  for (int k = 0; k < kWarpsPerBlock; ++k) {
    if (warp == k)
      cuda::each_owned<kSlots, V>(nvec, lane, [&](int c, int e) {
        const int col = (c * 32 + lane) * V + e;
        colsum[col] += aw[c][e];
        colsum[d + col] += ab[c][e];
      });
    __syncthreads();
  }
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    pw[blockIdx.x * (long long)d + j] = colsum[j];
    pb[blockIdx.x * (long long)d + j] = colsum[d + j];
  }
}

// ---- Generic path ----
template <typename T>
__global__ void ln_fwd_kernel(const T* x, const T* w, const T* b, long long m, long long d, float eps, T* y,
                              float* mean, float* rstd) {
  const int lane = threadIdx.x & 31;
  for (long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5); row < m;
       row += (long long)gridDim.x * kWarpsPerBlock) {
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
}

template <typename T>
__global__ void ln_bwd_dx_kernel(const T* dy, const T* x, const T* w, const float* mean, const float* rstd,
                                 long long m, long long d, T* dx) {
  const int lane = threadIdx.x & 31;
  for (long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5); row < m;
       row += (long long)gridDim.x * kWarpsPerBlock) {
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

// grid ceil(D/32), block (32, kRowLanes): row lane y adds chunks y, y + kRowLanes, ..., then the
// lanes are added in lane order (column_sum2). Both paths finish here.
template <typename T>
__global__ void ln_bwd_finish_kernel(const float* pw, const float* pb, long long chunks, long long d, T* dw, T* db) {
  long long col = blockIdx.x * 32LL + threadIdx.x;
  float aw = 0.f, ab = 0.f;
  if (col < d)
    for (long long k = threadIdx.y; k < chunks; k += kRowLanes) {
      aw += pw[k * d + col];
      ab += pb[k * d + col];
    }
  cuda::column_sum2<32, kRowLanes>(aw, ab);
  if (threadIdx.y == 0 && col < d) {
    dw[col] = from_float<T>(aw);
    db[col] = from_float<T>(ab);
  }
}

template <typename T> const T* src(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> T* dst(Tensor& t) { return static_cast<T*>(t.data_ptr()); }

// Calls f(S) with S = std::integral_constant<int, slots> for the register path (cuda::row_slots
// says yes for these pointers and D), or S = 0 for the generic path.
template <typename T, typename F>
void by_path(long long d, std::initializer_list<const void*> ptrs, F&& f) {
  const int slots = cuda::row_slots(d, sizeof(T), kMaxPerLane, ptrs);
  if (slots > 0)
    cuda::with_pow2<kMaxPerLane / cuda::kVec<T>>(slots, f);
  else
    f(std::integral_constant<int, 0>{});
}

}  // namespace

void layer_norm_fwd_cuda(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                         Tensor& rstd) {
  const long long m = x.size(0), d = x.size(1);
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    by_path<T>(d, {x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr()}, [&](auto S) {
      auto kernel = ln_fwd_kernel<T>;  // both paths take the same arguments
      if constexpr (decltype(S)::value > 0) kernel = ln_fwd_reg_kernel<T, decltype(S)::value>;
      kernel<<<row_blocks(m), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
          src<T>(x), src<T>(w), src<T>(b), m, d, static_cast<float>(eps), dst<T>(y), mean.data<float>(),
          rstd.data<float>());
    });
    CUDA_CHECK_LAUNCH("layer_norm forward");
  });
}

void layer_norm_bwd_cuda(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         Tensor& dx, Tensor& dw, Tensor& db) {
  const long long m = x.size(0), d = x.size(1);
  // At least 32 rows per chunk so each partial row amortises its write; at most kMaxChunks partials.
  // The chunking depends on M only, so the sums' order (and bits) do not depend on the device.
  const long long chunks = std::max(1LL, std::min<long long>(kMaxChunks, (m + 31) / 32));
  const long long rows_per_chunk = (m + chunks - 1) / chunks;
  Tensor pw = Tensor::empty({chunks, d}, DType::F32, x.device());
  Tensor pb = Tensor::empty({chunks, d}, DType::F32, x.device());
  float *ppw = pw.data<float>(), *ppb = pb.data<float>();
  const float *pm = mean.data<float>(), *pr = rstd.data<float>();
  cudaStream_t s = cuda::compute_stream();
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    const T *pdy = src<T>(dy), *px = src<T>(x), *pw_ = src<T>(w);
    by_path<T>(d, {pdy, px, pw_, dx.data_ptr()}, [&](auto S) {
      if constexpr (decltype(S)::value > 0) {  // dx and the partials in one pass
        ln_bwd_reg_kernel<T, decltype(S)::value><<<static_cast<unsigned>(chunks), kWarpsPerBlock * 32,
                                                   2 * d * sizeof(float), s>>>(pdy, px, pw_, pm, pr, m,
                                                                               static_cast<int>(d), rows_per_chunk,
                                                                               dst<T>(dx), ppw, ppb);
      } else {  // dx, then the partials in a second pass over x and dy
        ln_bwd_dx_kernel<<<row_blocks(m), kWarpsPerBlock * 32, 0, s>>>(pdy, px, pw_, pm, pr, m, d, dst<T>(dx));
        const dim3 grid(static_cast<unsigned>((d + 31) / 32), static_cast<unsigned>(chunks));
        ln_bwd_partial_kernel<<<grid, dim3(32, kRowLanes), 0, s>>>(pdy, px, pm, pr, m, d, rows_per_chunk, ppw, ppb);
      }
    });
    ln_bwd_finish_kernel<<<static_cast<unsigned>((d + 31) / 32), dim3(32, kRowLanes), 0, s>>>(
        ppw, ppb, chunks, d, dst<T>(dw), dst<T>(db));
    CUDA_CHECK_LAUNCH("layer_norm backward");
  });
}

}  // namespace tandem::kernels
