// core/ops/common/cuda/pack.cuh: N-element packs (one N * sizeof(T)-byte access), the warp-per-row
// register layout built on them, and a compile-time power of two from a runtime one (internal, CUDA
// only).
//
// Bandwidth kernels (layer norm, softmax, pooling) read and write their data as packs of N
// consecutive elements, N a power of two chosen at run time: the widest access the row length or
// channel count divides and the pointers' alignment allows. A Pack<T, N> may only be used on
// pointers aligned to its size; the launchers check that and fall back to smaller packs. They are
// instantiated for N = 1, 2, ..., Max only: with_pow2<Max>(n, f) calls
// f(std::integral_constant<int, P>{}) with the largest such P <= n (1 for n < 1).
// The warp-per-row layout (layer norm, softmax): a row of npack packs is held by one warp in
// registers, lane `lane` owning packs k = c * 32 + lane for the slots c < kSlots (absent when
// k >= npack). The loops over a lane's packs are fully unrolled, so per-slot arrays indexed by
// (c, e) stay in registers.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include "core/ops/common/cuda/dispatch.cuh"

namespace tandem::cuda {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Calls f(c, e) for element e of every pack c the lane owns.
template <int kSlots, int N, typename F>
__device__ __forceinline__ void each_owned(int npack, int lane, F&& f) {
#pragma unroll
  for (int c = 0; c < kSlots; ++c)
    if (c * 32 + lane < npack)
#pragma unroll
      for (int e = 0; e < N; ++e) f(c, e);
}

// Stores the lane's packs of `row`, element (c, e) being g(c, e) (a float, narrowed to T).
template <int kSlots, int N, typename T, typename G>
__device__ __forceinline__ void store_owned(T* row, int npack, int lane, G&& g) {
#pragma unroll
  for (int c = 0; c < kSlots; ++c) {
    const int k = c * 32 + lane;
    if (k < npack) {
      Pack<T, N> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(g(c, e));
      reinterpret_cast<Pack<T, N>*>(row)[k] = o;
    }
  }
}

// The lane's packs of a row, as loaded (raw T: half the registers of floats for 16-bit types).
template <typename T, int N, int kSlots>
struct OwnedRow {
  Pack<T, N> v[kSlots];
  __device__ __forceinline__ void load(const T* row, int npack, int lane) {
    const Pack<T, N>* r = reinterpret_cast<const Pack<T, N>*>(row);
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      if (c * 32 + lane < npack) v[c] = r[c * 32 + lane];
  }
  __device__ __forceinline__ float at(int c, int e) const { return to_float(v[c].v[e]); }
};

template <int Max, typename F>
void with_pow2(int n, F&& f) {
  static_assert(Max >= 1 && (Max & (Max - 1)) == 0, "with_pow2: Max must be a power of two");
  if constexpr (Max > 1) {
    if (n < Max) return with_pow2<Max / 2>(n, std::forward<F>(f));
  }
  f(std::integral_constant<int, Max>{});
}

}  // namespace tandem::cuda
