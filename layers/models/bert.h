// layers/models/bert.h: BertForMaskedLM (Hugging Face's names and parameter counts) and its sizes.
//
// Sizes (Turc et al. 2019 for the small ones; Devlin et al. 2018 for base/large), every one with
// intermediate = 4 * hidden, 512 positions, 2 token types, LayerNorm eps 1e-12, dropout 0.1:
//   bert_tiny L2 H128 A2   bert_mini L4 H256 A4   bert_small L4 H512 A8   bert_medium L8 H512 A8
//   bert_base L12 H768 A12   bert_large L24 H1024 A16
// Parameter counts with vocab 30522, the tied decoder weight counted once: bert_base 109,514,298,
// bert_large 335,174,458 (= sum(p.numel() for p in BertForMaskedLM(cfg).parameters())).
//
// Names: bert.embeddings.*, bert.encoder.layer.<i>.*, cls.predictions.bias,
// cls.predictions.transform.{dense, LayerNorm}.* - exactly HF's named_parameters(). The decoder
// weight is bert.embeddings.word_embeddings.weight itself (layers/transformer.h explains the tie).
// Init is HF's _init_weights: Linear and Embedding weights N(0, 0.02), biases 0, LayerNorm weight 1
// and bias 0, and the word embedding's padding row (pad_token_id 0) zeroed. Unlike
// nn.Embedding(padding_idx=0), the padding row is not frozen: it still gets gradients (in HF it
// gets them too, through the tied decoder).
// It is a models::MaskedLM (masked_lm.h), the whole one: its own canonical form.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/models/masked_lm.h"  // defines: MaskedLM
#include "layers/transformer.h"

namespace tandem::models {

// The config of a named size ("bert_tiny" .. "bert_large"); throws with the valid names otherwise.
BertConfig bert_config(const std::string& name, int64_t vocab_size = 30522);
bool is_bert_name(const std::string& name);

// The rows of the encoder's output h [B, S, H] whose label is not ignore_index - the MLM head's
// input - and their labels: picked [m, H] and labels [m] (one small host copy of the labels).
// flat is h as [B*S, H], for a caller's zero loss when m = 0 (picked and labels are then undefined).
// `labels` must have input_ids' shape [B, S] (checked here: the message names both).
struct MaskedRows {
  Tensor flat, picked, labels;
  int64_t m = 0;
};
MaskedRows masked_rows(const Tensor& h, const Tensor& input_ids, const Tensor& labels, int64_t ignore_index);

// The whole model (MaskedLM's canonical form is itself).
class BertForMaskedLM : public MaskedLM {
 public:
  // init = false leaves weights uninitialised (counting parameters, or loading a checkpoint next).
  BertForMaskedLM(const BertConfig& cfg, uint64_t seed, bool init = true);
  // input_ids [B, S] (i32/i64); attention_mask [B, S] (1 = token, 0 = padding) or undefined;
  // token_type_ids [B, S] or undefined (segment 0) -> logits [B, S, vocab].
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids);
  // The Module interface: no padding, one segment.
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor(), Tensor()); }
  // Masked-LM loss: mean cross-entropy over the positions whose label is not ignore_index (HF's
  // labels: the original token id at masked positions, -100 elsewhere). Only those rows go
  // through the head, so the [tokens, vocab] decoder GEMM shrinks to the ~15% masked tokens; the
  // value equals cross_entropy(forward(...), labels, ignore_index) up to rounding.
  Tensor mlm_loss(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                  const Tensor& labels, int64_t ignore_index = -100) override;
  // forward's logits at `rows` (MaskedLM::masked_logits): every position's, then the rows picked.
  Tensor masked_logits(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                       const Tensor& rows) override;
  std::string type_name() const override { return "BertForMaskedLM"; }
  const BertConfig& config() const override { return cfg_; }
  int64_t canonical_parameters() const override { return num_parameters(); }
  void with_canonical(const std::function<void(const Module&)>& use) override { use(*this); }

 private:
  BertConfig cfg_;
  Child<BertModel> bert_;
  Child<BertOnlyMLMHead> cls_;
};

}  // namespace tandem::models
