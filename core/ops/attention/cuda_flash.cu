// core/ops/attention/cuda_flash.cu: flash attention (FlashAttention-2's algorithm) on CUDA,
// forward and backward, with the key padding mask and counter-RNG dropout of the reference path
// (semantics in core/ops/attention/kernels.h; CPU twin in core/ops/attention/cpu_flash.cpp).
//
// Why our own kernel and not cuDNN's SDPA: cuDNN 9.19's dedicated SDPA operation
// (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR) has no dropout attribute and expresses padding
// only as per-sequence lengths (a prefix of kept keys), and the generic-graph SDPA that the cuDNN
// frontend builds draws dropout with cuDNN's own Philox RNG. Neither can reproduce the reference
// path's masks (fn::Dropout over a counter) or an arbitrary [B, S] attention_mask, so they could
// not be parity partners of the reference in training, and neither can be checked without a GPU.
// This kernel can: its CPU twin runs the same blocking and is tested against the reference in CI.
//
// What this first version is: a SIMT kernel, f32 FMAs from shared memory, no tensor cores (no
// WMMA/mma.sync). It never materialises the [Sq, Sk] probabilities (memory O(S), not O(S^2)) and is
// deterministic (no atomics: dQ and dK/dV are separate kernels, each output written by one warp).
// Its speed against cuBLAS + softmax and PyTorch's SDPA is for bench_ops to measure.
//
// Thread mapping (kWarps = 4 warps, 128 threads per block; lane = threadIdx.x % 32):
//   forward, dQ:  block = kBlockRows = 16 query rows of one (b, h); warp w owns rows
//                 w * 4 .. w * 4 + 3. Keys stream in tiles of 32: lane j scores key k0 + j against
//                 the warp's 4 rows; the row's output columns d = lane + 32 c (c < NC) are spread
//                 across lanes, and each key's p is broadcast with __shfl_sync to update them.
//   dK/dV:        block = kBlockKeys = 16 keys; warp w owns keys w * 4 .. w * 4 + 3. Queries stream
//                 in tiles of 32, lane i recomputing p for query i0 + i; columns spread as above.
// NC = ceil(D / 32) <= 4 is a template parameter, so the per-lane accumulators stay in registers.
//
// Shared memory holds tiles as f32 (widened once at load). A tile that lanes read one row per lane
// (Ks[lane][d] over d) has row stride D + 1: D is a multiple of 8, so D + 1 is odd and the 32
// lanes' addresses lane * (D + 1) + d fall in 32 different banks. Tiles read by all lanes at one
// row (broadcast) or across d (consecutive addresses) need no padding.
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/dropout/functors.h"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::kFullMask;
using cuda::to_float;
using flash::kBlockKeys;
using flash::kBlockRows;
using flash::kKeysPerWarp;
using flash::kRowsPerWarp;
using flash::kTile;
using flash::kWarps;

constexpr int kThreads = kWarps * 32;
static_assert(kTile == 32, "one key (forward, dQ) or one query (dK/dV) per lane");

__device__ __forceinline__ bool is_masked(const int32_t* mrow, long long j) { return mrow && mrow[j] == 0; }

// Loads rows [r0, r0 + n) of a [rows_total, D] matrix into sm[n][stride] as f32; rows past
// rows_total read as 0, so the tail tile computes with finite values (they are never written, and
// a 0 * garbage NaN can never reach a kept accumulator). Every thread of the block takes part.
template <typename T>
__device__ __forceinline__ void load_tile(float* sm, int stride, const T* src, long long r0, int n,
                                          long long rows_total, int D) {
  for (int e = threadIdx.x; e < n * D; e += kThreads) {
    const int r = e / D, d = e - r * D;  // consecutive threads read consecutive d: coalesced
    sm[r * stride + d] = r0 + r < rows_total ? to_float(src[(r0 + r) * D + d]) : 0.f;
  }
}

// Forward. grid = (BH, ceil(Sq / 16)); dynamic smem = fwd_smem(D) bytes.
template <typename T, int NC>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                             const T* __restrict__ v, const int32_t* __restrict__ mask,
                                                             FlashArgs a, fn::Dropout drop, T* __restrict__ o,
                                                             float* __restrict__ stats) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(a.d), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* Qs = smem;                   // [16][D]      read: Qs[row][d], one row for all lanes (broadcast)
  float* Ks = Qs + kBlockRows * D;    // [32][D + 1]  read: Ks[lane][d] (padded stride: no bank conflict)
  float* Vs = Ks + kTile * (D + 1);   // [32][D]      read: Vs[j][lane + 32 c] (consecutive)
  const long long bh = blockIdx.x, q0 = static_cast<long long>(blockIdx.y) * kBlockRows;
  const int32_t* mrow = mask ? mask + (bh / a.heads) * a.sk : nullptr;
  const T* kh = k + bh * a.sk * D;
  const T* vh = v + bh * a.sk * D;
  load_tile(Qs, D, q + bh * a.sq * D, q0, kBlockRows, a.sq, D);
  const float keep_scale = 1.f / (1.f - a.dropout_p);

  // Per-row state. m and alpha are warp-uniform (they come from warp_max); lsum is this lane's
  // share of the running sum (its keys only), rescaled by the same alpha, summed at the end.
  float m[kRowsPerWarp], lsum[kRowsPerWarp], acc[kRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = kMaskedScore;  // never -inf, so m_old - m_new is never (-inf) - (-inf) = NaN
    lsum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.f;
  }
  for (long long k0 = 0; k0 < a.sk; k0 += kTile) {
    __syncthreads();  // all warps are done reading the previous Ks/Vs (first pass: Qs is written)
    load_tile(Ks, D + 1, kh, k0, kTile, a.sk, D);
    load_tile(Vs, D, vh, k0, kTile, a.sk, D);
    __syncthreads();  // the tile is in shared memory
    const long long key = k0 + lane;
    const bool valid = key < a.sk;
    const bool masked = valid && is_masked(mrow, key);
    float s[kRowsPerWarp] = {};
    for (int d = 0; d < D; ++d) {
      const float kd = Ks[lane * (D + 1) + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] += Qs[(warp * kRowsPerWarp + r) * D + d] * kd;
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      // A row past Sq (zeros in Qs) runs too, so every shuffle has the full warp; it is not stored.
      const long long row = bh * a.sq + q0 + warp * kRowsPerWarp + r;
      const float z = valid ? flash::logit(s[r], a.scale, masked) : -INFINITY;  // keys past Sk: exp -> 0
      const float m_new = fmaxf(m[r], cuda::warp_max(z));
      const float alpha = expf(m[r] - m_new);
      const float e = expf(z - m_new);
      lsum[r] = lsum[r] * alpha + e;
      float pd = e;
      if (a.dropout) pd = valid && drop.keep(static_cast<uint64_t>(row * a.sk + key)) ? e * keep_scale : 0.f;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[r][c] *= alpha;
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(kFullMask, pd, j);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          if (d < D) acc[r][c] += pj * Vs[j * D + d];
        }
      }
      m[r] = m_new;
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float l = cuda::warp_sum(lsum[r]);  // >= 1: the max term is exp(0)
    const long long i = q0 + warp * kRowsPerWarp + r;
    if (i >= a.sq) continue;  // warp-uniform
    const long long row = bh * a.sq + i;
    const float inv = 1.f / l;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < D) o[row * D + d] = from_float<T>(acc[r][c] * inv);
    }
    if (lane == 0) {
      stats[2 * row] = m[r];
      stats[2 * row + 1] = inv;
    }
  }
}

// d_row = dot(dO_row, O_row) in f32: one warp per row, 8 rows per 256-thread block.
template <typename T>
__global__ void flash_drow_kernel(const T* __restrict__ o, const T* __restrict__ dout, long long rows, int D,
                                  float* __restrict__ drow) {
  const long long row = blockIdx.x * 8LL + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay full-mask
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += to_float(dout[row * D + d]) * to_float(o[row * D + d]);
  s = cuda::warp_sum(s);
  if (lane == 0) drow[row] = s;
}

// Recomputes, for one (row, key), p, the dropped y and the score gradient ds (see the CPU twin's
// recompute(); dot_dov = dot(dO_row, v_key)). Callers pass p = 0 for a row or key that does not
// exist, which makes y and ds 0 as well.
struct Grad {
  float y, ds;
};
__device__ __forceinline__ Grad recompute(const FlashArgs& a, const fn::Dropout& drop, float keep_scale, float p,
                                          float dot_dov, float d_row, bool masked, bool exists, uint64_t idx) {
  const bool keep = !a.dropout || (exists && drop.keep(idx));
  const float y = !a.dropout ? p : keep ? p * keep_scale : 0.f;
  const float dp = !a.dropout ? dot_dov : keep ? dot_dov * keep_scale : 0.f;
  return {y, flash::dscore(p, dp, d_row, a.scale, masked)};
}

// dQ. grid = (BH, ceil(Sq / 16)); dynamic smem = dq_smem(D) bytes.
template <typename T, int NC>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                            const T* __restrict__ v, const T* __restrict__ dout,
                                                            const float* __restrict__ stats,
                                                            const float* __restrict__ drow,
                                                            const int32_t* __restrict__ mask, FlashArgs a,
                                                            fn::Dropout drop, T* __restrict__ dq) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(a.d), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* Qs = smem;                   // [16][D]      broadcast reads
  float* Gs = Qs + kBlockRows * D;    // [16][D]      dO rows, broadcast reads
  float* Ks = Gs + kBlockRows * D;    // [32][D + 1]  Ks[lane][d] for scores, Ks[j][lane + 32 c] for dQ
  float* Vs = Ks + kTile * (D + 1);   // [32][D + 1]  Vs[lane][d] for dot(dO, v)
  const long long bh = blockIdx.x, q0 = static_cast<long long>(blockIdx.y) * kBlockRows;
  const int32_t* mrow = mask ? mask + (bh / a.heads) * a.sk : nullptr;
  const T* kh = k + bh * a.sk * D;
  const T* vh = v + bh * a.sk * D;
  load_tile(Qs, D, q + bh * a.sq * D, q0, kBlockRows, a.sq, D);
  load_tile(Gs, D, dout + bh * a.sq * D, q0, kBlockRows, a.sq, D);
  const float keep_scale = 1.f / (1.f - a.dropout_p);

  // Row statistics, warp-uniform (every lane loads the same address: one broadcast transaction).
  float m[kRowsPerWarp], inv[kRowsPerWarp], dr[kRowsPerWarp], acc[kRowsPerWarp][NC];
  bool row_ok[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const long long i = q0 + warp * kRowsPerWarp + r, row = bh * a.sq + i;
    row_ok[r] = i < a.sq;
    m[r] = row_ok[r] ? stats[2 * row] : 0.f;
    inv[r] = row_ok[r] ? stats[2 * row + 1] : 0.f;
    dr[r] = row_ok[r] ? drow[row] : 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.f;
  }
  for (long long k0 = 0; k0 < a.sk; k0 += kTile) {
    __syncthreads();  // previous Ks/Vs fully read (first pass: Qs/Gs written)
    load_tile(Ks, D + 1, kh, k0, kTile, a.sk, D);
    load_tile(Vs, D + 1, vh, k0, kTile, a.sk, D);
    __syncthreads();
    const long long key = k0 + lane;
    const bool valid = key < a.sk;
    const bool masked = valid && is_masked(mrow, key);
    float s[kRowsPerWarp] = {}, g[kRowsPerWarp] = {};
    for (int d = 0; d < D; ++d) {
      const float kd = Ks[lane * (D + 1) + d], vd = Vs[lane * (D + 1) + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        s[r] += Qs[(warp * kRowsPerWarp + r) * D + d] * kd;
        g[r] += Gs[(warp * kRowsPerWarp + r) * D + d] * vd;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const long long row = bh * a.sq + q0 + warp * kRowsPerWarp + r;
      const bool exists = valid && row_ok[r];
      // z <= m for the row's own keys (m is their max), so exp never overflows; a missing row or
      // key gets p = 0 without evaluating exp(z - m) at all.
      const float p = exists ? expf(flash::logit(s[r], a.scale, masked) - m[r]) * inv[r] : 0.f;
      const Grad gr = recompute(a, drop, keep_scale, p, g[r], dr[r], masked, exists,
                                static_cast<uint64_t>(row * a.sk + key));
      for (int j = 0; j < kTile; ++j) {
        const float dsj = __shfl_sync(kFullMask, gr.ds, j);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          if (d < D) acc[r][c] += dsj * Ks[j * (D + 1) + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!row_ok[r]) continue;
    const long long row = bh * a.sq + q0 + warp * kRowsPerWarp + r;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < D) dq[row * D + d] = from_float<T>(acc[r][c]);
    }
  }
}

// dK and dV. grid = (BH, ceil(Sk / 16)); dynamic smem = dkv_smem(D) bytes.
template <typename T, int NC>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                             const T* __restrict__ v, const T* __restrict__ dout,
                                                             const float* __restrict__ stats,
                                                             const float* __restrict__ drow,
                                                             const int32_t* __restrict__ mask, FlashArgs a,
                                                             fn::Dropout drop, T* __restrict__ dk,
                                                             T* __restrict__ dv) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(a.d), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* Kb = smem;                   // [16][D]      the block's keys, broadcast reads
  float* Vb = Kb + kBlockKeys * D;    // [16][D]      the block's values, broadcast reads
  float* Qs = Vb + kBlockKeys * D;    // [32][D + 1]  Qs[lane][d] for scores, Qs[i][lane + 32 c] for dK
  float* Gs = Qs + kTile * (D + 1);   // [32][D + 1]  dO rows: Gs[lane][d], Gs[i][lane + 32 c] for dV
  float* Ms = Gs + kTile * (D + 1);   // [32]         the query tile's m
  float* Is = Ms + kTile;             // [32]         1 / l
  float* Ds = Is + kTile;             // [32]         d_row
  const long long bh = blockIdx.x, k0 = static_cast<long long>(blockIdx.y) * kBlockKeys;
  const int32_t* mrow = mask ? mask + (bh / a.heads) * a.sk : nullptr;
  const T* qh = q + bh * a.sq * D;
  const T* gh = dout + bh * a.sq * D;
  load_tile(Kb, D, k + bh * a.sk * D, k0, kBlockKeys, a.sk, D);
  load_tile(Vb, D, v + bh * a.sk * D, k0, kBlockKeys, a.sk, D);
  const float keep_scale = 1.f / (1.f - a.dropout_p);

  bool key_ok[kKeysPerWarp], masked[kKeysPerWarp];
  float acc_k[kKeysPerWarp][NC], acc_v[kKeysPerWarp][NC];
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    const long long key = k0 + warp * kKeysPerWarp + kk;
    key_ok[kk] = key < a.sk;
    masked[kk] = key_ok[kk] && is_masked(mrow, key);
#pragma unroll
    for (int c = 0; c < NC; ++c) acc_k[kk][c] = acc_v[kk][c] = 0.f;
  }
  for (long long i0 = 0; i0 < a.sq; i0 += kTile) {
    __syncthreads();  // previous Qs/Gs/Ms/Is/Ds fully read (first pass: Kb/Vb written)
    load_tile(Qs, D + 1, qh, i0, kTile, a.sq, D);
    load_tile(Gs, D + 1, gh, i0, kTile, a.sq, D);
    if (threadIdx.x < kTile) {
      const long long i = i0 + threadIdx.x, row = bh * a.sq + i;
      Ms[threadIdx.x] = i < a.sq ? stats[2 * row] : 0.f;
      Is[threadIdx.x] = i < a.sq ? stats[2 * row + 1] : 0.f;
      Ds[threadIdx.x] = i < a.sq ? drow[row] : 0.f;
    }
    __syncthreads();
    const long long i = i0 + lane, row = bh * a.sq + i;  // this lane's query
    const bool q_ok = i < a.sq;
    float s[kKeysPerWarp] = {}, g[kKeysPerWarp] = {};
    for (int d = 0; d < D; ++d) {
      const float qd = Qs[lane * (D + 1) + d], gd = Gs[lane * (D + 1) + d];
#pragma unroll
      for (int kk = 0; kk < kKeysPerWarp; ++kk) {
        s[kk] += qd * Kb[(warp * kKeysPerWarp + kk) * D + d];
        g[kk] += gd * Vb[(warp * kKeysPerWarp + kk) * D + d];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const long long key = k0 + warp * kKeysPerWarp + kk;
      const bool exists = q_ok && key_ok[kk];
      const float p = exists ? expf(flash::logit(s[kk], a.scale, masked[kk]) - Ms[lane]) * Is[lane] : 0.f;
      const Grad gr = recompute(a, drop, keep_scale, p, g[kk], Ds[lane], masked[kk], exists,
                                static_cast<uint64_t>(row * a.sk + key));
      for (int j = 0; j < kTile; ++j) {
        const float yj = __shfl_sync(kFullMask, gr.y, j), dsj = __shfl_sync(kFullMask, gr.ds, j);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          if (d < D) {
            acc_v[kk][c] += yj * Gs[j * (D + 1) + d];
            acc_k[kk][c] += dsj * Qs[j * (D + 1) + d];
          }
        }
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    if (!key_ok[kk]) continue;
    const long long key = bh * a.sk + k0 + warp * kKeysPerWarp + kk;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < D) {
        dk[key * D + d] = from_float<T>(acc_k[kk][c]);
        dv[key * D + d] = from_float<T>(acc_v[kk][c]);
      }
    }
  }
}

// Shared-memory bytes per block, matching the carve-up at the top of each kernel.
size_t fwd_smem(int D) { return sizeof(float) * (kBlockRows * D + kTile * (D + 1) + kTile * D); }
size_t dq_smem(int D) { return sizeof(float) * (2 * kBlockRows * D + 2 * kTile * (D + 1)); }
size_t dkv_smem(int D) { return sizeof(float) * (2 * kBlockKeys * D + 2 * kTile * (D + 1) + 3 * kTile); }

// Above 48 KiB a kernel must opt in to dynamic shared memory (D = 128: dQ 49,408 B, dK/dV
// 49,792 B; the H100 allows 227 KiB). Set on every launch: it is per device and cheap.
template <typename K> void launch_smem(K kernel, size_t bytes, const char* what) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
               what);
}

// Runs body with the compile-time column count NC = ceil(D / 32) (D <= kMaxHeadDim is checked by
// attention(); checked again here because a wrong NC would silently drop columns).
template <typename F> void with_nc(int64_t D, F&& body) {
  TANDEM_CHECK(D >= 1 && D <= flash::kMaxHeadDim, "flash attention: head dim ", D, " is outside [1, ",
               flash::kMaxHeadDim, "]");
  switch ((D + 31) / 32) {
    case 1: body(std::integral_constant<int, 1>{}); break;
    case 2: body(std::integral_constant<int, 2>{}); break;
    case 3: body(std::integral_constant<int, 3>{}); break;
    default: body(std::integral_constant<int, 4>{}); break;
  }
}

const int32_t* mask_ptr(const Tensor& mask) {
  return mask.defined() ? static_cast<const int32_t*>(mask.data_ptr()) : nullptr;
}
unsigned tiles(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void flash_attention_fwd_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const FlashArgs& a, Tensor& out, Tensor& stats) {
  if (a.bh == 0 || a.sq == 0) return;
  TANDEM_CHECK(a.bh <= 0x7fffffff && tiles(a.sq, kBlockRows) <= 65535,
               "flash attention: batch * heads = ", a.bh, " or query length ", a.sq,
               " exceeds the launch grid; use AttentionBackend::Reference");
  const dim3 grid(static_cast<unsigned>(a.bh), tiles(a.sq, kBlockRows));
  const size_t smem = fwd_smem(static_cast<int>(a.d));
  TANDEM_CUDA_FLOAT_TYPES(q.dtype(), T, [&] {
    with_nc(a.d, [&](auto nc) {
      auto kernel = flash_fwd_kernel<T, decltype(nc)::value>;
      launch_smem(kernel, smem, "flash attention forward: shared memory opt-in");
      kernel<<<grid, kThreads, smem, cuda::compute_stream()>>>(
          static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
          static_cast<const T*>(v.data_ptr()), mask_ptr(mask), a, fn::Dropout{a.dropout_p, a.seed, a.offset},
          static_cast<T*>(out.data_ptr()), static_cast<float*>(stats.data_ptr()));
      CUDA_CHECK_LAUNCH("flash attention forward");
    });
  });
}

void flash_attention_bwd_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& stats, const Tensor& mask, const FlashArgs& a,
                              Tensor& dq, Tensor& dk, Tensor& dv) {
  if (a.bh == 0 || a.sq == 0 || a.sk == 0) return;
  TANDEM_CHECK(a.bh <= 0x7fffffff && tiles(a.sq, kBlockRows) <= 65535 && tiles(a.sk, kBlockKeys) <= 65535,
               "flash attention backward: the shape exceeds the launch grid; use AttentionBackend::Reference");
  const long long rows = a.bh * a.sq;
  Tensor drow = Tensor::empty({rows}, DType::F32, q.device());
  const int D = static_cast<int>(a.d);
  const fn::Dropout drop{a.dropout_p, a.seed, a.offset};
  TANDEM_CUDA_FLOAT_TYPES(q.dtype(), T, [&] {
    const T* pq = static_cast<const T*>(q.data_ptr());
    const T* pk = static_cast<const T*>(k.data_ptr());
    const T* pv = static_cast<const T*>(v.data_ptr());
    const T* pg = static_cast<const T*>(dout.data_ptr());
    const float* ps = static_cast<const float*>(stats.data_ptr());
    float* pd = static_cast<float*>(drow.data_ptr());
    flash_drow_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(out.data_ptr()), pg, rows, D, pd);
    CUDA_CHECK_LAUNCH("flash attention backward (dot(dO, O))");
    with_nc(a.d, [&](auto nc) {
      constexpr int NC = decltype(nc)::value;
      auto dq_kernel = flash_dq_kernel<T, NC>;
      const size_t dq_bytes = dq_smem(D);
      launch_smem(dq_kernel, dq_bytes, "flash attention dQ: shared memory opt-in");
      dq_kernel<<<dim3(static_cast<unsigned>(a.bh), tiles(a.sq, kBlockRows)), kThreads, dq_bytes,
                  cuda::compute_stream()>>>(pq, pk, pv, pg, ps, pd, mask_ptr(mask), a, drop,
                                            static_cast<T*>(dq.data_ptr()));
      CUDA_CHECK_LAUNCH("flash attention backward (dQ)");
      auto dkv_kernel = flash_dkv_kernel<T, NC>;
      const size_t dkv_bytes = dkv_smem(D);
      launch_smem(dkv_kernel, dkv_bytes, "flash attention dK/dV: shared memory opt-in");
      dkv_kernel<<<dim3(static_cast<unsigned>(a.bh), tiles(a.sk, kBlockKeys)), kThreads, dkv_bytes,
                   cuda::compute_stream()>>>(pq, pk, pv, pg, ps, pd, mask_ptr(mask), a, drop,
                                             static_cast<T*>(dk.data_ptr()), static_cast<T*>(dv.data_ptr()));
      CUDA_CHECK_LAUNCH("flash attention backward (dK, dV)");
    });
  });
}

}  // namespace tandem::kernels
