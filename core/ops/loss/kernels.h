// core/ops/loss/kernels.h: backend entry points for cross-entropy and top-k accuracy (internal).
//
// The op layer (core/ops/loss/loss.cpp) validates shapes, dtypes and (CPU) label range and records autograd;
// these functions only compute. Shapes: logits [N, C]; labels [N] (i32 or i64); lse [N] and loss [1]
// in the statistics dtype (f64 for f64 logits, f32 otherwise); dlogits like logits.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

// loss[0] = mean_n ( lse_n - (1-s) x[n, label_n] - (s/C) sum_c x[n, c] ), lse_n = log sum_c exp x[n, c].
// lse is written for the backward, which then needs no second pass to find the row maxima.
void cross_entropy_fwd_cpu(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss);
// dlogits[n, c] = grad_loss[0] / N * (exp(x[n, c] - lse_n) - (1-s)[c == label_n] - s/C).
// grad_loss stays a tensor (not a host float) so the CUDA path never syncs to read it.
void cross_entropy_bwd_cpu(const Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& grad_loss,
                           float smoothing, Tensor& dlogits);
// Rows where fewer than k classes rank above the label's (fn::ranks_above: NaN highest, ties to the
// lower index).
int64_t topk_correct_cpu(const Tensor& logits, const Tensor& labels, int k);
// The vocabulary-parallel pieces (core/ops/loss/loss.h): targets i64 [N], -1 = another shard's.
// stats [3, N] (m, sum exp(x - m), x[target] or 0); gathered [T, 3, N] -> lse [N], loss [1];
// dlogits = grad_loss[0] / N * (exp(x - lse) - [j == target]).
void cross_entropy_shard_stats_cpu(const Tensor& logits, const Tensor& targets, Tensor& stats);
void cross_entropy_shard_combine_cpu(const Tensor& gathered, Tensor& lse, Tensor& loss);
void cross_entropy_shard_grad_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& grad_loss, Tensor& dlogits);

#ifdef TANDEM_WITH_CUDA
void cross_entropy_fwd_cuda(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss);
void cross_entropy_bwd_cuda(const Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& grad_loss,
                            float smoothing, Tensor& dlogits);
int64_t topk_correct_cuda(const Tensor& logits, const Tensor& labels, int k);
void cross_entropy_shard_stats_cuda(const Tensor& logits, const Tensor& targets, Tensor& stats);
void cross_entropy_shard_combine_cuda(const Tensor& gathered, Tensor& lse, Tensor& loss);
void cross_entropy_shard_grad_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& grad_loss, Tensor& dlogits);
// cross_entropy_*_cuda clamp a label outside [0, C) and count it in a device counter (one per
// device); this reads and zeroes the current device's counter, synchronising the compute stream.
int64_t take_bad_label_count_cuda();
#endif

}  // namespace tandem::kernels
