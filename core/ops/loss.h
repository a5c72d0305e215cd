// core/ops/loss.h: fused softmax cross-entropy, and accuracy counting.
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
// ops::all_finite(logits) (core/ops/finite.h) as well.
int64_t topk_correct(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::ops
