// core/ops/common/cuda/column_plan.h: the launch plan for per-column reductions over an [M, C] row-major
// matrix (internal; plain host C++, so tests/test_column_plan.cpp checks it without a GPU).
//
// The kernels that use it (column_reduce.cuh's callers: the bias gradients in elementwise/cuda.cu
// and fused_bias/cuda.cu, batchnorm/cuda.cu's statistics) launch grid (ceil(C / kColTx), count)
// with blocks of (kColTx, kColTy); chunk r covers rows
// [r * rows_per_chunk, min(M, (r + 1) * rows_per_chunk)).
// What the plan guarantees: every row is in exactly one chunk, no chunk is empty (except the
// single chunk of an empty input), and count <= 1024, far under grid.y's limit of 65535.
#pragma once

namespace tandem::cuda {

constexpr int kColTx = 32;  // columns per block: one warp-wide row segment
constexpr int kColTy = 8;   // row lanes per block
constexpr long long kColMaxBlocks = 1024;  // ~8 blocks per SM on an H100 (132 SMs): a few waves

struct ColumnChunks {
  long long rows_per_chunk;
  int count;  // R, at least 1 (an empty input still gets one empty chunk)
};

// Enough chunks to fill the GPU with ~kColMaxBlocks blocks, but each thread still walks >= 16
// rows so the partials stay a small fraction of the traffic. C = 0 plans like C = 1 (the callers
// return before launching on an empty matrix; the plan just must not divide by zero).
inline ColumnChunks plan_column_chunks(long long M, long long C) {
  long long bx = (C + kColTx - 1) / kColTx;
  if (bx < 1) bx = 1;
  long long want = (M + kColTy * 16 - 1) / (kColTy * 16);
  long long cap = bx >= kColMaxBlocks ? 1 : kColMaxBlocks / bx;
  long long R = want < 1 ? 1 : (want > cap ? cap : want);
  long long rpc = (M + R - 1) / R;
  if (rpc < 1) rpc = 1;
  long long count = (M + rpc - 1) / rpc;
  return {rpc, static_cast<int>(count < 1 ? 1 : count)};
}

}  // namespace tandem::cuda
