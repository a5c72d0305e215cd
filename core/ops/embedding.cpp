// core/ops/embedding.cpp: validation, backend dispatch and autograd for embedding lookup.
//
// Index range is checked here on the host for both backends, as core/ops/embedding.h promises: an
// out-of-range token id is a tokenizer/vocabulary mismatch, and on a GPU it would otherwise be a
// silent out-of-bounds read. For CUDA indices that costs one copy of the K indices to the host
// and a wait on the compute stream per call.
// The table gradient is dense [V, D] (no sparse gradients), so optimizers and dist/'s buckets treat
// it like any other parameter gradient.
#include "core/ops/embedding.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/kernels/embedding.h"

namespace tandem::ops {

Tensor embedding(const Tensor& indices, const Tensor& table) {
  TANDEM_CHECK(indices.dtype() == DType::I64 || indices.dtype() == DType::I32,
               "embedding: indices must be i32 or i64, got ", indices.str());
  TANDEM_CHECK(table.dim() == 2, "embedding: table must be [V, D], got ", table.str());
  TANDEM_CHECK(is_floating(table.dtype()), "embedding: table must be floating point, got ", table.str());
  check_same_device(indices, table, "embedding");
  int64_t v = table.size(0), d = table.size(1), k = indices.numel();
  std::vector<int64_t> host = indices.to_vector_i64();  // copies (and syncs) when indices are on a GPU
  for (size_t i = 0; i < host.size(); ++i)
    TANDEM_CHECK(host[i] >= 0 && host[i] < v, "embedding: index ", host[i], " at position ", i,
                 " is outside the table's [0, ", v, ") rows; check the vocabulary size or sequence length");

  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape, table.dtype(), table.device());
  Tensor idx = indices.detach().view({k});
  Tensor out2 = out.view({k, d});
  TANDEM_BACKEND(table, kernels::embedding_fwd_cpu(idx, table, out2), kernels::embedding_fwd_cuda(idx, table, out2));
  autograd::record("EmbeddingBackward", {indices, table}, out,
                   [idx, v, d, dt = table.dtype(), dev = table.device()](std::vector<Tensor>& g) {
                     Tensor dtable = Tensor::empty({v, d}, dt, dev);
                     Tensor dout = g[0].view({idx.numel(), d});
                     TANDEM_BACKEND(dtable, kernels::embedding_bwd_cpu(idx, dout, dtable),
                                    kernels::embedding_bwd_cuda(idx, dout, dtable));
                     return std::vector<Tensor>{Tensor(), dtable};
                   });
  return out;
}

}  // namespace tandem::ops
