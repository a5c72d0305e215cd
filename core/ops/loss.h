// core/ops/loss.h: fused softmax cross-entropy, and accuracy counting.
//
// cross_entropy(logits [N, C], labels i64 [N], smoothing) = mean over the batch of
//   -(1 - s) log p[label] - (s / C) sum_c log p[c],    p = softmax(logits)
// (torch.nn.functional.cross_entropy with label_smoothing = s). Computed with the max-subtracted
// log-sum-exp in f32 (or f64), whatever the logits' dtype. The gradient is (p - target) / N.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.0f);
// The same with PyTorch's ignore_index (masked-LM labels use -100): rows whose label equals
// ignore_index are left out and the mean is over the others. Unlike PyTorch (0/0 = NaN), a batch
// where every row is ignored gives a loss of 0 with zero gradients, so one unlucky batch cannot
// poison a run. The kept rows are gathered (a differentiable row lookup) before the loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing, int64_t ignore_index);
// Number of rows whose label is among the k largest logits (ties count as correct). Not differentiable.
int64_t topk_correct(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::ops
