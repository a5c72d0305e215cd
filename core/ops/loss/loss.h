// core/ops/loss/loss.h: fused softmax cross-entropy, and accuracy counting.
//
// cross_entropy(logits [N, C], labels i64 [N], smoothing) = mean over the batch of
//   -(1 - s) log p[label] - (s / C) sum_c log p[c],    p = softmax(logits)
// (torch.nn.functional.cross_entropy with label_smoothing = s). Computed with the max-subtracted
// log-sum-exp in f32 (or f64), whatever the logits' dtype. The gradient is (p - target) / N.
// Non-finite logits, as in PyTorch: a NaN or +inf in a row makes that row's loss (so the mean) and
// that row's gradient NaN; the other rows' gradients stay finite. (The row maximum skips NaN, as
// std::max and fmaxf do, but the NaN still enters the exp-sum, so it is never lost.)
//
// Label range: CPU labels are checked here and a bad one throws. CUDA labels are not copied back
// (that would sync the host with the GPU every step): the data loader checks them while they are
// still on the host (data/loader.cpp), and the CUDA kernels clamp any label outside [0, C) into
// range, so it cannot read out of bounds, and count it on the device. bad_label_count() reads
// that count lazily (e.g. at a logging step).
#pragma once
#include <array>

#include "core/tensor.h"

namespace tandem::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.0f);
// The same with PyTorch's ignore_index (masked-LM labels use -100): rows whose label equals
// ignore_index are left out and the mean is over the others. Unlike PyTorch (0/0 = NaN), a batch
// where every row is ignored gives a loss of 0 with zero gradients, so one unlucky batch cannot
// poison a run. The kept rows are gathered (a differentiable row lookup) before the loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing, int64_t ignore_index);
// Out-of-range CUDA labels that cross_entropy clamped on the current device since the last call,
// then resets the count. Synchronises the compute stream: call it off the hot path. 0 without CUDA.
int64_t take_bad_label_count();
// Number of rows whose label is among the k largest logits, in torch.argmax's order: NaN ranks
// above every number, and ties go to the lower class index (so a row of equal logits, all NaN or
// all 0, is correct only for labels < k, never for every label). Not differentiable. A NaN row is
// still counted by this rule; validation that must fail on non-finite logits asks
// ops::all_finite(logits) (core/ops/finite/finite.h) as well.
int64_t topk_correct(const Tensor& logits, const Tensor& labels, int k);

// ---- the local pieces of a cross-entropy whose classes are split across ranks ----
// Vocabulary-parallel cross-entropy (dist/tp/cross_entropy.h) runs a collective between these, so
// they are plain ops there, not differentiable here: dist/tp records the backward. Notation: the
// full logits are [N, C]; this shard holds columns [start, start + Cr) as `logits` [N, Cr];
// `targets` i64 [N] is label - start where the label is one of this shard's columns and -1 where it
// is another shard's. Statistics are f32 (f64 for f64 logits), as cross_entropy's.
//
// Per row, the shard's part [3, N]: row 0 the max m over its columns, row 1 sum_j exp(x_j - m),
// row 2 the target's logit (0 where the target is another shard's).
Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets);
// Every shard's part, gathered [T, 3, N] (shard t's at t) -> {lse [N], loss [1]}: the full rows'
// log-sum-exp, M + log sum_t exp(m_t - M) s_t with M = max_t m_t, and the mean over rows of
// lse - x[label] (exactly one shard holds each label). The value cross_entropy gives on the whole
// logits, up to rounding.
std::array<Tensor, 2> cross_entropy_shard_combine(const Tensor& gathered);
// The shard's gradient [N, Cr]: grad_loss[0] / N * (exp(x - lse) - [j == target]). No collective:
// every shard already has the full rows' lse.
Tensor cross_entropy_shard_grad(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& grad_loss);

}  // namespace tandem::ops
