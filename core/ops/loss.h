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
// Number of rows whose label is among the k largest logits (ties count as correct). Not differentiable.
int64_t topk_correct(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::ops
