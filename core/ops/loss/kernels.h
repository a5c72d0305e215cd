// core/ops/loss/kernels.h: backend entry points for cross-entropy and top-k accuracy (internal).
//
// The op layer (core/ops/loss/loss.cpp) validates shapes, dtypes and (CPU) label range and records autograd;
// these functions only compute. Shapes: logits [N, C]; labels [N] (i32 or i64); lse [N] and loss [1]
// in the statistics dtype (f64 for f64 logits, f32 otherwise); dlogits like logits.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

// Both backends take the same arguments, so the entry points are listed once and declared per
// backend: <name>_cpu always, <name>_cuda in CUDA builds (cross_entropy_fwd_cpu/_cuda, ...).
//
// cross_entropy_fwd: loss[0] = mean_n ( lse_n - (1-s) x[n, label_n] - (s/C) sum_c x[n, c] ),
//   lse_n = log sum_c exp x[n, c]. lse is written for the backward, which then needs no second pass
//   to find the row maxima.
// cross_entropy_bwd: dlogits[n, c] = grad_loss[0] / N * (exp(x[n, c] - lse_n) - (1-s)[c == label_n] - s/C).
//   grad_loss stays a tensor (not a host float) so the CUDA path never syncs to read it.
// topk_correct: rows where fewer than k classes rank above the label's (fn::ranks_above: NaN
//   highest, ties to the lower index).
// cross_entropy_shard_*: the vocabulary-parallel pieces (core/ops/loss/loss.h): targets i64 [N], -1 =
//   another shard's. stats [3, N] (m, sum exp(x - m), x[target] or 0); gathered [T, 3, N] -> lse [N],
//   loss [1]; dlogits = grad_loss[0] / N * (exp(x - lse) - [j == target]).
#define TANDEM_LOSS_KERNELS(BACKEND)                                                                              \
  void cross_entropy_fwd_##BACKEND(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse,      \
                                   Tensor& loss);                                                                 \
  void cross_entropy_bwd_##BACKEND(const Tensor& logits, const Tensor& labels, const Tensor& lse,                \
                                   const Tensor& grad_loss, float smoothing, Tensor& dlogits);                    \
  int64_t topk_correct_##BACKEND(const Tensor& logits, const Tensor& labels, int k);                             \
  void cross_entropy_shard_stats_##BACKEND(const Tensor& logits, const Tensor& targets, Tensor& stats);          \
  void cross_entropy_shard_combine_##BACKEND(const Tensor& gathered, Tensor& lse, Tensor& loss);                 \
  void cross_entropy_shard_grad_##BACKEND(const Tensor& logits, const Tensor& targets, const Tensor& lse,        \
                                          const Tensor& grad_loss, Tensor& dlogits);

TANDEM_LOSS_KERNELS(cpu)

#ifdef TANDEM_WITH_CUDA
TANDEM_LOSS_KERNELS(cuda)
// cross_entropy_*_cuda clamp a label outside [0, C) and count it in a device counter (one per
// device); this reads and zeroes the current device's counter, synchronising the compute stream.
int64_t take_bad_label_count_cuda();
#endif

#undef TANDEM_LOSS_KERNELS

}  // namespace tandem::kernels
