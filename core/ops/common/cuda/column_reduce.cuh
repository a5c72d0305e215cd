// core/ops/common/cuda/column_reduce.cuh: per-column reductions over an [M, C] row-major matrix: the
// layout, and the ordered finish kernel (internal, CUDA only).
//
// Per-channel sums over NHWC activations (batchnorm statistics and gradients, the conv/linear bias
// gradient) all reduce the M = N*H*W rows of an [M, C] matrix into C columns. One thread per
// column walking all M rows leaves the GPU nearly idle (C is 64..4096, M is 10^5..10^7), so the
// rows are split into R chunks: grid (ceil(C / kColTx), R), block (kColTx, kColTy). threadIdx.x is
// the column, so a warp reads kColTx consecutive columns of one row (coalesced); each block writes
// one partial per column, and a second kernel adds the R partials in chunk order. No atomics: the
// result is bit-reproducible for a given shape.
// The plan (kColTx, kColTy, plan_column_chunks) is host code in column_plan.h, with a CPU test.
// column_finish_kernel is the second kernel, shared by the bias-gradient reductions
// (elementwise/cuda.cu, fused_bias/cuda.cu).
#pragma once
#include "core/ops/common/cuda/column_plan.h"
#include "core/ops/common/cuda/dispatch.cuh"

namespace tandem::cuda {

// dst[c] = sum over the `chunks` f32 partials of column c ([chunks, n] row-major), in chunk order
// (deterministic). One thread per column; launch with ceil(n / 256) blocks of 256.
template <typename T>
__global__ void column_finish_kernel(const float* partial, int chunks, long long n, T* dst) {
  long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= n) return;
  float acc = 0.f;
  for (int r = 0; r < chunks; ++r) acc += partial[r * n + c];
  dst[c] = from_float<T>(acc);
}

}  // namespace tandem::cuda
