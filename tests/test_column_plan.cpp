// tests/test_column_plan.cpp: the launch plan of the CUDA per-column reductions (bias gradients,
// batchnorm statistics; core/ops/common/cuda/column_plan.h), checked without a GPU. A wrong plan would
// drop or double-count rows, launch a grid.y over CUDA's 65535, or divide by zero on the host.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>

#include "core/ops/common/cuda/column_plan.h"

using tandem::cuda::ColumnChunks;
using tandem::cuda::kColMaxBlocks;
using tandem::cuda::kColTx;
using tandem::cuda::plan_column_chunks;

namespace {
// "" when the plan for [M, C] covers every row exactly once within the launch limits.
std::string check_plan(long long M, long long C) {
  const ColumnChunks p = plan_column_chunks(M, C);
  if (p.count < 1) return "no chunk";
  if (p.count > 65535) return "grid.y over 65535";
  if (p.rows_per_chunk < 1) return "empty chunk size";
  if (M == 0) return p.count == 1 ? "" : "an empty input needs one chunk";
  // Chunks [r * rpc, min(M, (r + 1) * rpc)): all rows covered, and the last chunk is not empty.
  if (static_cast<long long>(p.count) * p.rows_per_chunk < M) return "rows left over";
  if (static_cast<long long>(p.count - 1) * p.rows_per_chunk >= M) return "an empty chunk";
  const long long bx = (C + kColTx - 1) / kColTx;
  if (bx >= 1 && bx * p.count > kColMaxBlocks && p.count > 1) return "more blocks than the plan allows";
  return "";
}
}  // namespace

TEST_CASE("column plan: every row once, grid.y bounded, for tall, wide, tiny and empty matrices") {
  for (long long M : {0LL, 1LL, 2LL, 127LL, 128LL, 129LL, 4096LL, 65536LL, 1000003LL, 1LL << 28, (1LL << 31) + 5})
    for (long long C : {0LL, 1LL, 3LL, 8LL, 31LL, 32LL, 33LL, 64LL, 1000LL, 2048LL, 32768LL, 40000LL, 1LL << 20}) {
      CAPTURE(M);
      CAPTURE(C);
      CHECK(check_plan(M, C) == "");
    }
}

TEST_CASE("column plan: what the shapes of the GPU tests take") {
  // gpu_vector_access_parity's bias-gradient shapes, as its comment describes them.
  CHECK(plan_column_chunks(65536, 1).count == 512);   // one column block: 65536 / 128 row chunks
  CHECK(plan_column_chunks(20000, 3).count == 157);   // one column block, chunks of 128 rows
  CHECK(plan_column_chunks(4096, 64).count == 32);    // two column blocks, 32 chunks of 128 rows
  CHECK(plan_column_chunks(1, 40000).count == 1);     // 1250 column blocks: a single chunk
  CHECK(plan_column_chunks(2, 33000).count == 1);
  CHECK(plan_column_chunks(1024, 2048).count == 8);   // 64 column blocks x 8 chunks
  CHECK(plan_column_chunks(1LL << 28, 8).count == 1024);  // capped at kColMaxBlocks
  CHECK(plan_column_chunks(0, 0).count == 1);         // no division by zero on an empty matrix
}
