// core/ops/embedding/cpu.cpp: embedding gather and scatter-add on the CPU (the reference path).
// Row copies for the forward; the backward zeroes dtable and adds each dout row into its index's
// row in order, so repeated indices accumulate deterministically (in T: f32 or f64). A negative
// index (embedding_shard's "another shard's row") is a zero row forward and nothing backward.
#include <cstring>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/embedding/kernels.h"

namespace tandem::kernels {

void embedding_fwd_cpu(const Tensor& indices, const Tensor& table, Tensor& out) {
  TANDEM_CPU_WIDEN_16BIT(embedding_fwd_cpu, indices, table, out);
  TANDEM_CPU_FLOAT_TYPES(table.dtype(), T, [&] {
    with_index_ptr(indices, [&](const auto* ix) {
      int64_t k = indices.numel(), d = table.size(1);
      const T* t = table.data<T>();
      T* o = out.data<T>();
      for (int64_t i = 0; i < k; ++i) {
        if (ix[i] < 0) std::memset(static_cast<void*>(o + i * d), 0, static_cast<size_t>(d) * sizeof(T));
        else std::memcpy(o + i * d, t + ix[i] * d, static_cast<size_t>(d) * sizeof(T));
      }
    });
  });
}

void embedding_bwd_cpu(const Tensor& indices, const Tensor& dout, Tensor& dtable) {
  TANDEM_CPU_WIDEN_16BIT(embedding_bwd_cpu, indices, dout, dtable);
  TANDEM_CPU_FLOAT_TYPES(dtable.dtype(), T, [&] {
    with_index_ptr(indices, [&](const auto* ix) {
      int64_t k = indices.numel(), d = dtable.size(1);
      const T* g = dout.data<T>();
      T* dt = dtable.data<T>();
      std::memset(static_cast<void*>(dt), 0, dtable.nbytes());
      for (int64_t i = 0; i < k; ++i) {
        if (ix[i] < 0) continue;  // another shard's row
        T* row = dt + ix[i] * d;
        for (int64_t j = 0; j < d; ++j) row[j] += g[i * d + j];
      }
    });
  });
}

}  // namespace tandem::kernels
