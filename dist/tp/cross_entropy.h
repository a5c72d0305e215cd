// dist/tp/cross_entropy.h: cross-entropy over logits whose classes are split across the TP group.
//
// The vocabulary-parallel head leaves rank r with logits [N, Vr] for its vocabulary rows only.
// Gathering the full [N, V] logits would cost N x V per rank - for a BERT head the largest
// activation of the model - so, as Megatron-LM's vocab_parallel_cross_entropy, only per-row
// statistics cross the group:
//
//   each rank, on its Vr columns:  m_r = max_j x_j,  s_r = sum_j exp(x_j - m_r),  t_r = x_label or 0
//   one all_gather of [3, N] per rank  ->  M = max_r m_r,  lse = M + log sum_r exp(m_r - M) s_r,
//                                          loss = mean_n (lse_n - sum_r t_r)
//   backward, with no collective:  dL/dx_j = (exp(x_j - lse) - [j == label]) / N, on each shard
//
// Megatron all-reduces three times (MAX of the row maxima, then SUM of the target logits and of
// the exp-sums); tandem's communicators reduce with Sum and Avg only (communicator.h), and the
// per-row statistics are tiny (N = masked tokens), so one all_gather of 3N numbers per rank does
// the same job in one collective: every rank combines the same gathered bytes in the same order,
// so every rank gets bit-identical lse and loss. Each label lies in exactly one rank's range;
// there t_r is its logit, elsewhere an exact 0.
// Labels are read on the host (the masked-LM loss has them there already): ignore_index rows are
// dropped before the head, and a label outside [0, V) is an error, as in ops::cross_entropy.
// Left out: label smoothing (BERT's MLM uses none).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace tandem::dist::tp {

// logits [N, Vr] = columns [vocab_start, vocab_start + Vr) of the full [N, vocab] logits, labels
// i64 [N] (the same on every rank of `comm`); rows whose label is ignore_index are left out and the
// mean is over the rest (all left out: 0, as ops::cross_entropy). -> loss [1], the same on every
// rank, differentiable in logits.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t vocab_start, int64_t vocab,
                                    Communicator& comm, int64_t ignore_index = -100);

}  // namespace tandem::dist::tp
