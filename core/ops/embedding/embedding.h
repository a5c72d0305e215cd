// core/ops/embedding/embedding.h: table lookup. indices (i32 or i64) [...] into table [V, D] -> [..., D].
// The backward scatters-adds into a dense [V, D] gradient (repeated indices accumulate). An index
// outside [0, V) is an error on the CPU; on CUDA it is checked on the host before the launch.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor embedding(const Tensor& indices, const Tensor& table);

// One shard of a table split by rows - the lookup of a vocabulary-parallel embedding (dist/tp/
// layers.h), before its all-reduce. `table` [Vr, D] holds rows [start, start + Vr) of a table of
// `rows` rows. An index in that range reads its row; an index of another shard reads a zero row and
// sends it no gradient, so the sum over the shards of their outputs is the whole table's lookup.
// Every index must be in [0, rows) (checked on the host, as embedding's).
Tensor embedding_shard(const Tensor& indices, const Tensor& table, int64_t start, int64_t rows);

}  // namespace tandem::ops
