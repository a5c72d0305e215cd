// core/ops/common/cuda/block_reduce.cuh: warp and block reductions in float (internal, CUDA only).
//
// Used by the loss, norm, batchnorm and reduce kernels. All reductions combine values in a fixed order (a
// butterfly over lanes, then warps in index order), so a kernel that uses them is deterministic
// for a given launch shape: no atomics, and ranks that run the same shapes get the same bits.
#pragma once
#include <cuda_runtime.h>

namespace tandem::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Every lane of the warp returns the full result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). Every thread must call it;
// every thread gets the result. `scratch` is caller-provided shared memory of 32 floats; it may be
// reused after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// Column sum of one value in a (kCols, kRows) block, as column_sum2 below (the bias gradient).
template <int kCols, int kRows>
__device__ __forceinline__ void column_sum(float& a) {
  __shared__ float sa[kRows][kCols + 1];  // +1: a padded row starts in another bank
  sa[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0)
    for (int k = 1; k < kRows; ++k) a += sa[k][threadIdx.x];
}

// Column sums of two values in a block of shape (kCols, kRows), the layout of the per-channel
// partial-sum kernels (batchnorm, layer-norm weight gradients): threadIdx.x is the column,
// threadIdx.y a row lane. Every thread passes its (a, b) and must call it; threads with
// threadIdx.y == 0 get back a and b summed over the kRows lanes of their column, added in lane
// order (deterministic). The others keep their own values.
template <int kCols, int kRows>
__device__ __forceinline__ void column_sum2(float& a, float& b) {
  __shared__ float sa[kRows][kCols + 1];  // +1: a padded row starts in another bank
  __shared__ float sb[kRows][kCols + 1];
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int k = 1; k < kRows; ++k) {
      a += sa[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
  }
}

}  // namespace tandem::cuda
