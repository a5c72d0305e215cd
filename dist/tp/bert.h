// dist/tp/bert.h: BertForMaskedLM split across a tensor-parallel group, Megatron-style.
//
// The same module tree and parameter names as layers/models/bert.h (Hugging Face's), each
// parameter holding this rank's shard of the canonical one (shard.h says which are split, and how):
//
//   bert.embeddings.word_embeddings      VocabParallelEmbedding   rows (vocabulary) split; g after the lookup
//   bert.embeddings.{position, token_type}_embeddings, LayerNorm  replicated
//   encoder.layer.i.attention.self.{query, key, value}  ColumnParallelLinear: heads split, A/T per rank
//   encoder.layer.i.attention.output.dense              RowParallelLinear: g, then the replicated bias
//   encoder.layer.i.intermediate.dense                  ColumnParallelLinear (FFN width / T)
//   encoder.layer.i.output.dense                        RowParallelLinear
//   encoder.layer.i.*.LayerNorm, cls.predictions.transform.*  replicated
//   cls.predictions.bias                 vocabulary split, with the decoder: the tied word-embedding shard
//
// One layer, forward (f: identity forward / all-reduce backward; g: all-reduce forward / identity):
//
//   x ─ f ─ [Q K V]_r GEMM ─ attention on my A/T heads ─ [out-proj]_r GEMM ─ g ─ +b, dropout, +x, LN ─ a
//   a ─ f ─ [FFN1]_r GEMM, +b_r, GELU ─ [FFN2]_r GEMM ─ g ─ +b, dropout, +a, LN ─ out
//
// so one all-reduce of [B, S, H] per block forward (the g's) and one per block backward (the f's);
// everything between f and g is this rank's slice, everything outside is replicated - identical
// bits on every rank of the group, because an all-reduce hands every rank the same bits. The head:
// transform (replicated) ─ f ─ logits [N, V/T] = h W_word,r^T + b_r ─ vocab_parallel_cross_entropy,
// which gathers 3 numbers per row, never the [N, V] logits.
//
// Replicated parameters need no extra all-reduce of their gradients across the TP group (verified
// by tests/test_tp_bert.cpp): their inputs and their upstream gradients are replicated - every
// gradient entering the replicated part comes out of an f, which already summed the slices - so
// each rank computes the whole, identical gradient. Data parallelism (DDP, ZeRO) then averages
// every parameter, shards included, over the DP communicator only (tp/grid.h).
//
// Dropout - the rule, as Megatron's, and the two random streams:
//   - dropout on replicated activations (embeddings, each block's output) must draw the SAME mask
//     on every TP rank, or the replicas would diverge: it draws from `replicated_dropout` (default:
//     the process's default generator, as BertForMaskedLM's dropout does, so train_encoder's seed
//     and its checkpointed "default" RNG state cover it). Every TP rank seeds it alike.
//   - attention-probability dropout acts inside the region, on this rank's heads: it draws from a
//     stream of its own per TP rank, the model-owned attention_generator(), seeded
//     seed + 2718 + tp_rank (Megatron's model-parallel RNG offset), so the heads of different
//     ranks get independent masks (the same stream would give head h of rank 0 and head h of rank 1
//     the same mask). Ranks at the same TP index in different DP groups share the seed, as in
//     Megatron; their data differ.
// Consequence: TP T with dropout is a different random function from one rank with dropout (the
// attention masks come from another stream); with dropout 0 it is the same function, which is
// what the equivalence tests check.
//
// Init: HF's _init_weights, drawn shard by shard at the counters the canonical model's draw would
// use (tp/layers.h normal_shard_): a TP model built with seed s holds exactly the shards of
// BertForMaskedLM(cfg, s), without ever building the whole model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/tp/layers.h"
#include "dist/tp/shard.h"           // defines: TpLayout
#include "layers/models/masked_lm.h"  // defines: MaskedLM
#include "layers/transformer.h"

namespace tandem::dist::tp {

struct TpBertOptions {
  // Dropout on replicated activations (see the header comment); null: default_generator().
  Generator* replicated_dropout = nullptr;
  // Megatron's offset of the model-parallel stream: attention dropout draws from
  // Generator(seed + kAttentionSeedOffset + tp_rank).
  static constexpr uint64_t kAttentionSeedOffset = 2718;
};

class TpBertEmbeddings : public OptionalInputModule {
 public:
  TpBertEmbeddings(const BertConfig& cfg, Communicator& comm, Generator& dropout);
  VocabParallelEmbedding& word() { return *word_; }

 private:
  Child<VocabParallelEmbedding> word_;
  Child<Embedding> position_, token_type_;
  Child<LayerNorm> norm_;
  Child<Dropout> dropout_;
  int64_t max_pos_;
  Tensor pos_ids_;
  Tensor forward_impl(const Tensor& input_ids, const Tensor& token_type_ids) override;
};

class TpBertSelfAttention : public OptionalInputModule {
 public:
  TpBertSelfAttention(const BertConfig& cfg, Communicator& comm, Generator& attention_dropout);

 private:
  // x [B, S, H] replicated -> this rank's heads' context [B, S, H/T].
  Tensor forward_impl(const Tensor& x, const Tensor& attention_mask) override;
  Child<ColumnParallelLinear> query_, key_, value_;
  Communicator* comm_;
  Generator* gen_;
  int64_t local_heads_;
  BertConfig cfg_;
};

// Row-parallel dense, g, then bias + dropout + residual (one op) and the post-LN LayerNorm: BERT's
// ResidualOutput (layers/transformer.h) on a RowParallelLinear; h is this rank's slice [..., in/T].
inline Tensor dense_bias_dropout_add(RowParallelLinear& dense, const Tensor& h, const Tensor& residual, float p,
                                     bool training, Generator& gen) {
  return ops::bias_dropout_add(dense.reduced_without_bias(h), dense.bias(), residual, p, training, gen);
}
class TpBertResidualOutput : public ResidualOutput<RowParallelLinear> {
 public:
  TpBertResidualOutput(const BertConfig& cfg, int64_t in_features, Communicator& comm, Generator& dropout,
                       std::string type)
      : ResidualOutput(cfg,
                       std::make_shared<RowParallelLinear>(in_features, cfg.hidden_size, comm, RowParallelOptions{},
                                                           nullptr),
                       dropout, std::move(type)) {}
};

// BERT's EncoderLayer (layers/transformer.h) on the parallel modules.
class TpBertLayer : public EncoderLayer<TpBertSelfAttention, TpBertResidualOutput, ColumnParallelLinear> {
 public:
  TpBertLayer(const BertConfig& cfg, Communicator& comm, Generator& dropout, Generator& attention_dropout);

 private:
  Tensor ffn_input(const Tensor& in) override;  // f, then this rank's slice of the FFN width
  Communicator* comm_;
};

// The trainer's MaskedLM (layers/models/masked_lm.h), split: its canonical form is assembled over
// the TP group (shard.h), and its extra state is the attention-dropout stream below.
class TpBertForMaskedLM : public models::MaskedLM {
 public:
  // `comm` is the TP group (Grid::tp()); every rank of it builds the model with the same cfg and
  // seed. init = false leaves the shards uninitialised (a checkpoint's shards are loaded next).
  TpBertForMaskedLM(const BertConfig& cfg, Communicator& comm, uint64_t seed, TpBertOptions options = {},
                    bool init = true);
  // This rank's logits shard [B, S, Vr]: vocabulary rows vocab_rows() of the full logits.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids);
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor(), Tensor()); }
  // The last hidden state [B, S, H] (replicated): BertModel's output.
  Tensor hidden(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids);
  // BertForMaskedLM::mlm_loss's value and rule (only labelled rows go through the head), with the
  // vocabulary-parallel head and cross-entropy. The same loss on every rank of the group.
  Tensor mlm_loss(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                  const Tensor& labels, int64_t ignore_index = -100) override;
  // The rows' logits from forward's shards, cast to f32 and joined over the group (one all_gather,
  // each rank's columns padded to the widest shard).
  Tensor masked_logits(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                       const Tensor& rows) override;
  std::string type_name() const override { return "BertForMaskedLM"; }
  const BertConfig& config() const override { return cfg_; }
  int64_t canonical_parameters() const override;  // each shard counted at its full size
  // Collective over the group: gather_state_dict of the shards, and on TP rank 0 a BertForMaskedLM
  // (in the shards' 16-bit dtype under AMP) holding them.
  void with_canonical(const std::function<void(const Module&)>& use) override;
  NamedTensors local_state_dict(NamedTensors canonical) const override;  // shard_state_dict for this rank
  NamedTensors canonical_state_dict(NamedTensors mine) override;         // gather_state_dict over the group
  // "tp" (the group's size) and "tp_attention_rng_offset"; the offset is restored only at the same
  // size (it counts this rank's heads' draws): at another the stream restarts from its seed, which
  // matters only with dropout on.
  std::map<std::string, std::string> extra_state() const override;
  void set_extra_state(const std::map<std::string, std::string>& extra) override;
  Communicator& comm() const { return *comm_; }
  ShardRange vocab_rows() const { return vocab_; }
  // The attention-dropout stream of this TP rank (see the header comment): its offset advances alike
  // on every rank, so saving offset() and restoring it with the same seed resumes the stream.
  Generator& attention_generator() { return *attention_gen_; }

 private:
  Tensor head(const Tensor& h);  // [..., H] -> logits shard [..., Vr]
  BertConfig cfg_;
  Communicator* comm_;
  TpLayout layout_;  // which canonical parameters are split, and how (shard.h)
  ShardRange vocab_;
  std::unique_ptr<Generator> attention_gen_;
  Child<TpBertEmbeddings> embeddings_;
  std::vector<Child<TpBertLayer>> layers_;
  Child<LayerNorm> final_ln_;  // pre-LN only
  Child<BertPredictionHeadTransform> transform_;
  Tensor head_bias_;  // cls.predictions.bias shard [Vr]
};

}  // namespace tandem::dist::tp
