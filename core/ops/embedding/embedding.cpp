// core/ops/embedding/embedding.cpp: validation, backend dispatch and autograd for embedding lookup.
//
// Index range is checked here on the host for both backends, as core/ops/embedding/embedding.h promises: an
// out-of-range token id is a tokenizer/vocabulary mismatch, and on a GPU it would otherwise be a
// silent out-of-bounds read. For CUDA indices that costs one copy of the K indices to the host
// and a wait on the compute stream per call.
// The table gradient is dense [V, D] (no sparse gradients), so optimizers and dist/'s buckets treat
// it like any other parameter gradient.
#include "core/ops/embedding/embedding.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/embedding/kernels.h"

namespace tandem::ops {

namespace {

void check_inputs(const Tensor& indices, const Tensor& table, const char* op) {
  TANDEM_CHECK(indices.dtype() == DType::I64 || indices.dtype() == DType::I32, op,
               ": indices must be i32 or i64, got ", indices.str());
  TANDEM_CHECK(table.dim() == 2, op, ": table must be [V, D], got ", table.str());
  TANDEM_CHECK(is_floating(table.dtype()), op, ": table must be floating point, got ", table.str());
  check_same_device(indices, table, op);
}

// The lookup and its node, for flat row indices `idx` [K] into `table` (negative: a zero row);
// the output has `shape` + [D].
Tensor lookup(const Tensor& indices, const Tensor& idx, const Tensor& table, const char* node) {
  int64_t v = table.size(0), d = table.size(1), k = idx.numel();
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape, table.dtype(), table.device());
  Tensor out2 = out.view({k, d});
  TANDEM_BACKEND(table, kernels::embedding_fwd_cpu(idx, table, out2), kernels::embedding_fwd_cuda(idx, table, out2));
  autograd::record(node, {indices, table}, out, [idx, v, d, dt = table.dtype(), dev = table.device()](std::vector<Tensor>& g) {
    Tensor dtable = Tensor::empty({v, d}, dt, dev);
    Tensor dout = g[0].view({idx.numel(), d});
    TANDEM_BACKEND(dtable, kernels::embedding_bwd_cpu(idx, dout, dtable), kernels::embedding_bwd_cuda(idx, dout, dtable));
    return std::vector<Tensor>{Tensor(), dtable};
  });
  return out;
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& table) {
  check_inputs(indices, table, "embedding");
  const int64_t v = table.size(0);
  std::vector<int64_t> host = indices.to_vector_i64();  // copies (and syncs) when indices are on a GPU
  for (size_t i = 0; i < host.size(); ++i)
    TANDEM_CHECK(host[i] >= 0 && host[i] < v, "embedding: index ", host[i], " at position ", i,
                 " is outside the table's [0, ", v, ") rows; check the vocabulary size or sequence length");
  return lookup(indices, indices.detach().view({indices.numel()}), table, "EmbeddingBackward");
}

Tensor embedding_shard(const Tensor& indices, const Tensor& table, int64_t start, int64_t rows) {
  check_inputs(indices, table, "embedding_shard");
  TANDEM_CHECK(start >= 0 && start + table.size(0) <= rows, "embedding_shard: the shard's rows [", start, ", ",
               start + table.size(0), ") are not inside the whole table's [0, ", rows, ")");
  // The shard's own row numbers, made on the host where the range check already has the indices
  // (one more copy: the local indices go back to the table's device).
  std::vector<int64_t> local = indices.to_vector_i64();
  for (size_t i = 0; i < local.size(); ++i) {
    TANDEM_CHECK(local[i] >= 0 && local[i] < rows, "embedding_shard: index ", local[i], " at position ", i,
                 " is outside the whole table's [0, ", rows, ") rows; check the vocabulary size");
    local[i] = local[i] >= start && local[i] < start + table.size(0) ? local[i] - start : -1;
  }
  Tensor idx = Tensor::from_vector_i64(local, {indices.numel()}, DType::I64, table.device());
  return lookup(indices, idx, table, "EmbeddingShardBackward");
}

}  // namespace tandem::ops
