// core/ops/embedding/kernels.h: backend entry points for embedding lookup (internal).
//
// indices are viewed flat [K] (i32 or i64, already range-checked by core/ops/embedding/embedding.cpp),
// table is [V, D], out / dout are [K, D]. The backward overwrites dtable with the scatter-add.
// A negative index (embedding_shard: a row of another shard) reads a zero row and adds nothing.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

void embedding_fwd_cpu(const Tensor& indices, const Tensor& table, Tensor& out);
void embedding_bwd_cpu(const Tensor& indices, const Tensor& dout, Tensor& dtable);
#ifdef TANDEM_WITH_CUDA
void embedding_fwd_cuda(const Tensor& indices, const Tensor& table, Tensor& out);
void embedding_bwd_cuda(const Tensor& indices, const Tensor& dout, Tensor& dtable);
#endif

}  // namespace tandem::kernels
