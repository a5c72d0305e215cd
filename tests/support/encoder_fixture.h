// tests/support/encoder_fixture.h: the small BERT and the masked-LM batch shared by the encoder's
// multi-rank tests (tests/mpi_encoder_ddp.cpp, tests/mpi_encoder_zero.cpp).
//
// The model: bert_tiny's layout shrunk to 2 layers, hidden 32, 2 heads, FFN 64, 16 positions, with
// dropout 0 so every side of an equivalence test computes the same function. The batch: random ids
// (the same on every rank: a fixed seed), padding at the end of every other sequence (1 to 3
// positions), a second segment from the middle on, and the same number of labelled ([MASK]ed)
// positions in every sequence, at 1, 4, 7, ... - never on padding. Equal label counts make the mean
// over ranks of the per-rank losses the full batch's loss (mlm_loss averages over labels).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "layers/models/bert.h"

namespace tandem::testing::encoder_fixture {

constexpr int64_t kSeq = 12;     // tokens per sequence
constexpr int64_t kVocab = 50;
constexpr int64_t kMasked = 3;   // labelled positions per sequence

BertConfig tiny_config();

struct MlmBatch {
  Tensor ids, mask, types, labels;  // [n, kSeq] each, i64
};
// The full batch of n sequences (see the file comment).
MlmBatch full_batch(int64_t n);
// Sequences [from, from + count) of b.
MlmBatch rows(const MlmBatch& b, int64_t from, int64_t count);

}  // namespace tandem::testing::encoder_fixture
