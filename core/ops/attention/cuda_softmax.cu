// core/ops/attention/cuda_softmax.cu: scale-mask-softmax(-dropout) on CUDA, forward and backward
// (semantics in core/ops/attention/kernels.h; the CPU reference is core/ops/attention/cpu.cpp).
//
// Rows are many (B * H * Sq: 131,072 for BERT-large at batch 64) and short (Sk = 128..512 keys),
// and the op moves a few bytes per flop, so the kernels are written for bandwidth:
//  - The register path, Sk <= 1024: one warp per row, the row held in registers (at most
//    kMaxPerLane = 32 values per lane), read with the widest access (up to 16 bytes) that divides
//    Sk and still gives every lane of the warp work (Sk = 128 in bf16: 8-byte accesses, 4 keys per
//    lane). The forward reads x once and writes p (and the dropped output) once; the backward reads
//    p and dy once and writes dx once: dx = scale * p * (g - sum(g * p)) from the registers.
//  - The generic path, any Sk (longer rows): one warp per row re-reading the row from L1/L2 for
//    the max, the sum and the write.
// Both compute in f32 with expf (not __expf), so f32 results stay within a few ulp of the CPU's
// double reference, and draw the dropout mask from fn::Dropout's counter rule at the element's flat
// index r * Sk + j, so their masks are bit-identical to the CPU's and to each other.
#include <cstdint>

#include "core/ops/attention/kernels.h"
#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/pack.cuh"
#include "core/ops/common/cuda/pack_width.h"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/dropout/functors.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kWarpsPerBlock = 8;  // 256 threads
constexpr int kMaxPerLane = 32;    // register path: row values per lane, so Sk <= 32 * 32

unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

__device__ __forceinline__ bool is_masked(const int32_t* mrow, long long j) { return mrow && mrow[j] == 0; }

// Register path: a warp per row in the cuda::OwnedRow layout (pack.cuh), packs of N keys in kSlots
// slots per lane (kSlots * N <= kMaxPerLane; the fewest that hold the row, so a 128-key row holds
// 4 values per lane and leaves the registers - and the occupancy that hides DRAM latency - free).
// Whole warps take the same row, so the shuffles in warp_max/warp_sum always run with the full mask.
struct WarpRow {
  long long row, base;   // row index and its flat offset row * Sk
  const int32_t* mrow;   // its batch entry's key mask, or null
  int lane, npack;
  __device__ WarpRow(const SoftmaxArgs& a, const int32_t* mask, int n)
      : row(blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5)),
        base(row * a.cols),
        mrow(mask ? mask + (row / a.rows_per_batch) * a.cols : nullptr),
        lane(threadIdx.x & 31),
        npack(static_cast<int>(a.cols / n)) {}
  // Key index and flat element index of element e of slot c.
  __device__ int key(int c, int e, int n) const { return (c * 32 + lane) * n + e; }
};

template <typename T, int N, int kSlots>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    sms_fwd_reg_kernel(const T* x, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop, T* probs, T* out) {
  const WarpRow r(a, mask, N);
  if (r.row >= a.rows) return;
  cuda::OwnedRow<T, N, kSlots> xr;
  xr.load(x + r.base, r.npack, r.lane);
  float z[kSlots][N];
  float m = kMaskedScore;  // a fully masked row has max kMaskedScore, and then is uniform
  cuda::each_owned<kSlots, N>(r.npack, r.lane, [&](int c, int e) {
    z[c][e] = is_masked(r.mrow, r.key(c, e, N)) ? kMaskedScore : a.scale * xr.at(c, e);
    m = fmaxf(m, z[c][e]);
  });
  m = cuda::warp_max(m);
  float s = 0.f;
  cuda::each_owned<kSlots, N>(r.npack, r.lane, [&](int c, int e) { s += (z[c][e] = expf(z[c][e] - m)); });
  const float inv = 1.f / cuda::warp_sum(s);
  // p rounded to T: dropout scales the rounded probability, as the CPU does (it drops from the stored p).
  cuda::each_owned<kSlots, N>(r.npack, r.lane, [&](int c, int e) { z[c][e] = to_float(from_float<T>(z[c][e] * inv)); });
  cuda::store_owned<kSlots, N>(probs + r.base, r.npack, r.lane, [&](int c, int e) { return z[c][e]; });
  if (a.dropout)
    cuda::store_owned<kSlots, N>(out + r.base, r.npack, r.lane, [&](int c, int e) {
      return drop(z[c][e], static_cast<uint64_t>(r.base + r.key(c, e, N)));
    });
}

template <typename T, int N, int kSlots>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    sms_bwd_reg_kernel(const T* probs, const T* dy, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop, T* dx) {
  const WarpRow r(a, mask, N);
  if (r.row >= a.rows) return;
  cuda::OwnedRow<T, N, kSlots> pr, gr;
  pr.load(probs + r.base, r.npack, r.lane);
  gr.load(dy + r.base, r.npack, r.lane);
  float g[kSlots][N];
  float dot = 0.f;
  cuda::each_owned<kSlots, N>(r.npack, r.lane, [&](int c, int e) {
    g[c][e] = a.dropout ? drop(gr.at(c, e), static_cast<uint64_t>(r.base + r.key(c, e, N))) : gr.at(c, e);
    dot += g[c][e] * pr.at(c, e);
  });
  dot = cuda::warp_sum(dot);
  cuda::store_owned<kSlots, N>(dx + r.base, r.npack, r.lane, [&](int c, int e) {
    return is_masked(r.mrow, r.key(c, e, N)) ? 0.f : a.scale * pr.at(c, e) * (g[c][e] - dot);
  });
}

// Generic path (Sk > 1024).
template <typename T>
__global__ void sms_fwd_kernel(const T* x, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop, T* probs, T* out) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= a.rows) return;  // whole warps exit together, so the shuffles stay full-mask
  const long long cols = a.cols, base = row * cols;
  const int32_t* mrow = mask ? mask + (row / a.rows_per_batch) * cols : nullptr;
  float m = kMaskedScore;
  for (long long j = lane; j < cols; j += 32)
    m = fmaxf(m, is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[base + j]));
  m = cuda::warp_max(m);
  float s = 0.f;
  for (long long j = lane; j < cols; j += 32)
    s += expf((is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[base + j])) - m);
  s = cuda::warp_sum(s);
  const float inv = 1.f / s;
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float z = is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[i]);
    const T p = from_float<T>(expf(z - m) * inv);
    probs[i] = p;
    if (a.dropout) out[i] = from_float<T>(drop(to_float(p), static_cast<uint64_t>(i)));
  }
}

template <typename T>
__global__ void sms_bwd_kernel(const T* probs, const T* dy, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop,
                               T* dx) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= a.rows) return;
  const long long cols = a.cols, base = row * cols;
  const int32_t* mrow = mask ? mask + (row / a.rows_per_batch) * cols : nullptr;
  float dot = 0.f;
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float g = a.dropout ? drop(to_float(dy[i]), static_cast<uint64_t>(i)) : to_float(dy[i]);
    dot += g * to_float(probs[i]);
  }
  dot = cuda::warp_sum(dot);
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float g = a.dropout ? drop(to_float(dy[i]), static_cast<uint64_t>(i)) : to_float(dy[i]);
    dx[i] = is_masked(mrow, j) ? from_float<T>(0.f) : from_float<T>(a.scale * to_float(probs[i]) * (g - dot));
  }
}

const int32_t* mask_ptr(const Tensor& mask) {
  return mask.defined() ? static_cast<const int32_t*>(mask.data_ptr()) : nullptr;
}

// What both entry points launch with: one warp per row, the mask pointer and the dropout rule.
struct Launch {
  unsigned grid;
  unsigned block;
  cudaStream_t stream;
  const int32_t* mask;
  fn::Dropout drop;
};

// Calls launch(N, S, Launch) with the register path's keys per access N (cuda::row_pack_width) and
// slots S (cuda::slots_for) as std::integral_constants, or N = S = 0 for the generic path, then
// checks the launch. Empty problems launch nothing.
template <typename T, typename F>
void for_rows(const SoftmaxArgs& a, const Tensor& mask, std::initializer_list<const void*> ptrs, const char* what,
              F&& launch) {
  if (a.rows == 0 || a.cols == 0) return;
  const Launch l{row_blocks(a.rows), kWarpsPerBlock * 32, cuda::compute_stream(), mask_ptr(mask),
                 fn::Dropout{a.dropout_p, a.seed, a.offset}};
  const int n = cuda::row_pack_width(a.cols, sizeof(T), kMaxPerLane, ptrs);
  if (n > 0) {
    cuda::with_pow2<cuda::kVec<T>>(n, [&](auto N) {
      cuda::with_pow2<kMaxPerLane / decltype(N)::value>(cuda::slots_for(a.cols / n), [&](auto S) { launch(N, S, l); });
    });
  } else {
    launch(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{}, l);
  }
  CUDA_CHECK_LAUNCH(what);
}

template <typename T> T* dst(Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace

void scale_mask_softmax_fwd_cuda(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                 Tensor& out) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = static_cast<const T*>(x.data_ptr());
    T *pp = dst<T>(probs), *po = dst<T>(out);
    for_rows<T>(a, mask, {px, pp, po}, "scale_mask_softmax forward", [&](auto N, auto S, const Launch& l) {
      if constexpr (decltype(N)::value == 0)
        sms_fwd_kernel<T><<<l.grid, l.block, 0, l.stream>>>(px, l.mask, a, l.drop, pp, po);
      else
        sms_fwd_reg_kernel<T, decltype(N)::value, decltype(S)::value>
            <<<l.grid, l.block, 0, l.stream>>>(px, l.mask, a, l.drop, pp, po);
    });
  });
  if (a.rows > 0 && a.cols > 0 && !a.dropout && out.data_ptr() != probs.data_ptr())
    CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), probs.data_ptr(), probs.nbytes(), cudaMemcpyDeviceToDevice,
                               cuda::compute_stream()),
               "scale_mask_softmax copy");
}

void scale_mask_softmax_bwd_cuda(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                 Tensor& dx) {
  TANDEM_CUDA_FLOAT_TYPES(probs.dtype(), T, [&] {
    const T *pp = static_cast<const T*>(probs.data_ptr()), *pg = static_cast<const T*>(dy.data_ptr());
    T* pd = dst<T>(dx);
    for_rows<T>(a, mask, {pp, pg, pd}, "scale_mask_softmax backward", [&](auto N, auto S, const Launch& l) {
      if constexpr (decltype(N)::value == 0)
        sms_bwd_kernel<T><<<l.grid, l.block, 0, l.stream>>>(pp, pg, l.mask, a, l.drop, pd);
      else
        sms_bwd_reg_kernel<T, decltype(N)::value, decltype(S)::value>
            <<<l.grid, l.block, 0, l.stream>>>(pp, pg, l.mask, a, l.drop, pd);
    });
  });
}

}  // namespace tandem::kernels
