// core/ops/cuda/column_reduce.cuh: the launch plan for per-column reductions over an [M, C]
// row-major matrix (internal, CUDA only).
//
// Per-channel sums over NHWC activations (batchnorm statistics and gradients, the conv/linear bias
// gradient) all reduce the M = N*H*W rows of an [M, C] matrix into C columns. One thread per
// column walking all M rows leaves the GPU nearly idle (C is 64..4096, M is 10^5..10^7), so the
// rows are split into R chunks: grid (ceil(C / kColTx), R), block (kColTx, kColTy). threadIdx.x is
// the column, so a warp reads kColTx consecutive columns of one row (coalesced); each block writes
// one partial per column, and a second kernel adds the R partials in chunk order. No atomics: the
// result is bit-reproducible for a given shape.
// column_finish_kernel is that second kernel, shared by the bias-gradient reductions
// (elementwise.cu, fused_bias.cu).
#pragma once
#include "core/ops/cuda/dispatch.cuh"

namespace tandem::cuda {

constexpr int kColTx = 32;  // columns per block: one warp-wide row segment
constexpr int kColTy = 8;   // row lanes per block

struct ColumnChunks {
  long long rows_per_chunk;
  int count;  // R, at least 1 (an empty input still gets one empty chunk)
};

// Enough chunks to fill the GPU with ~1k blocks (a few waves on an H100's 132 SMs), but each
// thread still walks >= 16 rows so the partials stay a small fraction of the traffic.
inline ColumnChunks plan_column_chunks(long long M, long long C) {
  long long bx = (C + kColTx - 1) / kColTx;
  long long want = (M + kColTy * 16 - 1) / (kColTy * 16);
  long long cap = bx >= 1024 ? 1 : 1024 / bx;
  long long R = want < 1 ? 1 : (want > cap ? cap : want);
  long long rpc = (M + R - 1) / R;
  if (rpc < 1) rpc = 1;
  long long count = (M + rpc - 1) / rpc;
  return {rpc, static_cast<int>(count < 1 ? 1 : count)};
}

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
