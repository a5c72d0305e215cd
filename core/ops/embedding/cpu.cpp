// core/ops/embedding/cpu.cpp: embedding gather and scatter-add on the CPU (the reference path).
// Row copies for the forward; the backward zeroes dtable and adds each dout row into its index's
// row in order, so repeated indices accumulate deterministically (in T: f32 or f64). A negative
// index (embedding_shard's "another shard's row") is a zero row forward and nothing backward.
#include <cstring>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/embedding/kernels.h"

namespace tandem::kernels {

namespace {
// f(ix, k, d, from, to): the k indices of `indices`, the d features of a row, and the data of
// `from` and `to` in their dtype (f32 or f64, after widening) - what both directions loop over.
template <typename F>
void with_rows(const Tensor& indices, const Tensor& from, Tensor& to, F&& f) {
  TANDEM_CPU_FLOAT_TYPES(to.dtype(), T, [&] {
    with_index_ptr(indices, [&](const auto* ix) { f(ix, indices.numel(), to.size(1), from.data<T>(), to.data<T>()); });
  });
}
}  // namespace

void embedding_fwd_cpu(const Tensor& indices, const Tensor& table, Tensor& out) {
  TANDEM_CPU_WIDEN_16BIT(embedding_fwd_cpu, indices, table, out);
  with_rows(indices, table, out, [&](const auto* ix, int64_t k, int64_t d, const auto* t, auto* o) {
    const size_t row_bytes = static_cast<size_t>(d) * sizeof(*o);
    for (int64_t i = 0; i < k; ++i) {
      if (ix[i] < 0) std::memset(static_cast<void*>(o + i * d), 0, row_bytes);
      else std::memcpy(o + i * d, t + ix[i] * d, row_bytes);
    }
  });
}

void embedding_bwd_cpu(const Tensor& indices, const Tensor& dout, Tensor& dtable) {
  TANDEM_CPU_WIDEN_16BIT(embedding_bwd_cpu, indices, dout, dtable);
  with_rows(indices, dout, dtable, [&](const auto* ix, int64_t k, int64_t d, const auto* g, auto* dt) {
    std::memset(static_cast<void*>(dt), 0, dtable.nbytes());
    for (int64_t i = 0; i < k; ++i) {
      if (ix[i] < 0) continue;  // another shard's row
      auto* row = dt + ix[i] * d;
      for (int64_t j = 0; j < d; ++j) row[j] += g[i * d + j];
    }
  });
}

}  // namespace tandem::kernels
