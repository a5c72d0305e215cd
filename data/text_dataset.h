// data/text_dataset.h: a token stream packed into fixed-length sequences, with BERT's MLM masking.
//
// Packing: sequence i (of size()) is [CLS] + stream[i*(L-2), (i+1)*(L-2)) + [SEP] for seq_len L.
// Sequences cross document boundaries (the stream has a [SEP] after each document, see
// data/text_corpus.h), as in RoBERTa's FULL-SENTENCES packing, so no position is wasted on padding.
// The last sequence takes the stream's remainder and is filled with [PAD] after its [SEP]; those
// are the only padded positions (attention_mask 0), so no held-out text is thrown away.
//
// Masking (BERT's create_pretraining_data): the candidates are the positions holding a non-special
// token ([CLS], [SEP], [PAD], [UNK] and [MASK] are never predicted). max(1, round(mask_prob * n))
// of the n candidates are chosen uniformly without replacement (an exact count, as in the original
// BERT, rather than Hugging Face's per-position coin flip); each chosen position becomes [MASK] with
// probability 0.8, a uniformly drawn non-special token with 0.1, and stays unchanged with 0.1.
// labels holds the original id at chosen positions and kIgnoreIndex everywhere else.
// Every draw comes from a SampleRng keyed by (seed, epoch, sequence index) (data/transforms.h), so a
// sequence is masked the same way whatever rank, batch or resume point reads it, and differently
// in every epoch (dynamic masking, as RoBERTa). For a fixed held-out set, evaluate with one key.
#pragma once
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "data/wordpiece.h"

namespace tandem::data {

// labels at positions that are not predicted: PyTorch's CrossEntropyLoss ignore_index default.
constexpr int64_t kIgnoreIndex = -100;

struct MlmOptions {
  int64_t seq_len = 128;          // tokens per sequence, [CLS] and [SEP] included (BERT's phase 1)
  double mask_prob = 0.15;        // fraction of candidate positions predicted (BERT)
  double mask_token_prob = 0.8;   // of those: replaced by [MASK] (BERT)
  double random_token_prob = 0.1; // of those: replaced by a random non-special token (BERT); the rest kept
};

class MlmDataset {
 public:
  // stream: token ids (data/text_corpus.h); vocab_size bounds the random replacement tokens.
  MlmDataset(std::vector<int64_t> stream, SpecialIds special, int64_t vocab_size, MlmOptions opt = {});

  int64_t size() const { return num_sequences_; }  // packed sequences
  int64_t seq_len() const { return opt_.seq_len; }
  const std::vector<int64_t>& stream() const { return stream_; }
  const SpecialIds& special() const { return special_; }
  int64_t vocab_size() const { return vocab_size_; }
  const MlmOptions& options() const { return opt_; }

  // Sequence `index` before masking: seq_len ids and the attention mask (1 = token, 0 = [PAD]).
  void packed(int64_t index, int64_t* ids, int64_t* attention_mask) const;
  // Sequence `index` masked with key: input ids, attention mask and labels, seq_len values each.
  // Returns how many positions were chosen (labels != kIgnoreIndex).
  int64_t get(int64_t index, const SampleKey& key, int64_t* input_ids, int64_t* attention_mask,
              int64_t* labels) const;

 private:
  std::vector<int64_t> stream_;
  SpecialIds special_;
  int64_t vocab_size_ = 0;
  MlmOptions opt_;
  int64_t num_sequences_ = 0;
};

}  // namespace tandem::data
