// dist/tp/bert.cpp: the TP BERT's modules, its shard-wise HF init and its masked-LM loss (see bert.h).
// The forward passes mirror layers/transformer.cpp line for line, with f and g where bert.h draws
// them; the fused tails are the same ops (ops::linear_bias_gelu in the shared EncoderLayer;
// ops::bias_dropout_add after the row-parallel all-reduce, bert.h's dense_bias_dropout_add).
#include "dist/tp/bert.h"

#include <algorithm>
#include <utility>

#include "core/autocast.h"  // defines: is_16bit
#include "core/ops/ops.h"
#include "core/profile.h"
#include "dist/tp/cross_entropy.h"
#include "dist/tp/mappings.h"
#include "layers/amp_cast.h"     // defines: cast_for_amp
#include "layers/models/bert.h"  // defines: masked_rows, BertForMaskedLM

namespace tandem::dist::tp {
namespace {

// HF's _init_weights (layers/models/bert.cpp's hf_init), in the same module order, each shard
// drawn at the canonical draw's counters: the result is the canonical model's init, sliced.
void hf_init_shards(Module& model, const BertConfig& cfg, Generator& gen) {
  const double std = cfg.initializer_range;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* col = dynamic_cast<ColumnParallelLinear*>(m)) {
      Tensor w = col->weight();
      normal_shard_(w, {col->out_features(), col->in_features()}, 0, col->rows(), 0.0, std, gen);
      if (col->bias().defined()) Tensor(col->bias()).zero_();
    } else if (auto* row = dynamic_cast<RowParallelLinear*>(m)) {
      Tensor w = row->weight();
      normal_shard_(w, {row->out_features(), row->in_features()}, 1, row->columns(), 0.0, std, gen);
      if (row->bias().defined()) Tensor(row->bias()).zero_();
    } else if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(m)) {
      Tensor w = emb->weight();
      normal_shard_(w, {emb->num_embeddings(), w.size(1)}, 0, emb->rows(), 0.0, std, gen);
      // pad_token_id = 0 lives on the rank whose rows start at 0.
      if (name == "bert.embeddings.word_embeddings" && emb->rows().start == 0) w.detach().slice(0, 1).zero_();
    } else if (auto* lin = dynamic_cast<Linear*>(m)) {
      Tensor w = lin->weight();
      normal_(w, 0.0, std, gen);
      if (lin->bias().defined()) Tensor(lin->bias()).zero_();
    } else if (auto* e = dynamic_cast<Embedding*>(m)) {
      Tensor w = e->weight();
      normal_(w, 0.0, std, gen);
    } else {
      m->reset_parameters(gen);  // LayerNorm: weight 1, bias 0
    }
  }
}

// The rows' logits [m, V] from this rank's vocabulary columns [m, Vr] and the other ranks' (one
// all_gather over the group, each part padded to the widest; vocab_shard puts rank r's columns at
// start(r)). Every rank of the group gets the same tensor.
Tensor whole_vocabulary(const Tensor& picked, int64_t vocab, Communicator& tp) {
  const int n = tp.size();
  const int64_t m = picked.size(0);
  const int64_t widest = vocab_shard(vocab, 0, n).size;  // the first ranks get the extra rows
  const int64_t mine = picked.size(1);
  const std::vector<float> local = picked.to(Device::cpu()).to_vector();
  std::vector<float> padded(static_cast<size_t>(m * widest), 0.0f);
  for (int64_t i = 0; i < m; ++i)
    std::copy(local.begin() + i * mine, local.begin() + (i + 1) * mine, padded.begin() + i * widest);
  Tensor send = Tensor::from_vector(padded, {m * widest}).to(picked.device());
  Tensor all = Tensor::empty({n * m * widest}, DType::F32, picked.device());
  tp.all_gather(send, all, "tp validation logits")->wait();
  const std::vector<float> parts = all.to(Device::cpu()).to_vector();
  std::vector<float> whole(static_cast<size_t>(m * vocab));
  for (int r = 0; r < n; ++r) {
    const ShardRange range = vocab_shard(vocab, r, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < range.size; ++j) whole[i * vocab + range.start + j] = parts[(r * m + i) * widest + j];
  }
  return Tensor::from_vector(whole, {m, vocab}).to(picked.device());
}

// A module's parameters, then its buffers: what a state dict holds (BERT has no buffers and no
// conv layouts, so names and shapes are the file's).
NamedTensors tensors_of(const Module& m) {
  NamedTensors out = m.named_parameters();
  for (auto& b : m.named_buffers()) out.push_back(std::move(b));
  return out;
}

}  // namespace

// ---- embeddings ----

TpBertEmbeddings::TpBertEmbeddings(const BertConfig& cfg, Communicator& comm, Generator& dropout)
    : OptionalInputModule("BertEmbeddings"), max_pos_(cfg.max_position_embeddings) {
  word_ = register_module("word_embeddings",
                          std::make_shared<VocabParallelEmbedding>(cfg.vocab_size, cfg.hidden_size, comm, nullptr));
  position_ = register_module("position_embeddings",
                              std::make_shared<Embedding>(cfg.max_position_embeddings, cfg.hidden_size, nullptr));
  token_type_ = register_module("token_type_embeddings",
                                std::make_shared<Embedding>(cfg.type_vocab_size, cfg.hidden_size, nullptr));
  norm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(cfg.hidden_dropout_prob, &dropout));
}

Tensor TpBertEmbeddings::forward_impl(const Tensor& input_ids, const Tensor& token_type_ids) {
  TANDEM_CHECK(input_ids.dim() == 2, "BertEmbeddings: input_ids must be [batch, seq], got ", input_ids.str());
  const int64_t S = input_ids.size(1);
  TANDEM_CHECK(S <= max_pos_, "BertEmbeddings: sequence length ", S, " exceeds max_position_embeddings = ", max_pos_);
  if (!pos_ids_.defined() || pos_ids_.size(0) != S || pos_ids_.device() != input_ids.device()) {
    std::vector<int64_t> ids(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) ids[i] = i;
    pos_ids_ = Tensor::from_vector_i64(ids, {S}, DType::I64, input_ids.device());
  }
  Tensor h = (*word_)(input_ids);  // the vocabulary-parallel lookup, all-reduced: replicated from here on
  h = ops::add(h, (*position_)(pos_ids_));
  if (token_type_ids.defined()) {
    TANDEM_CHECK(token_type_ids.shape() == input_ids.shape(), "BertEmbeddings: token_type_ids ",
                 token_type_ids.str(), " must have the shape of input_ids ", input_ids.str());
    h = ops::add(h, (*token_type_)(token_type_ids));
  } else {
    h = ops::add(h, ops::reshape((*token_type_)(pos_ids_.slice(0, 1)), {h.size(2)}));  // segment 0
  }
  return (*dropout_)((*norm_)(h));  // replicated dropout: the same mask on every TP rank
}

// ---- attention ----

TpBertSelfAttention::TpBertSelfAttention(const BertConfig& cfg, Communicator& comm, Generator& attention_dropout)
    : OptionalInputModule("BertSelfAttention"), comm_(&comm), gen_(&attention_dropout), cfg_(cfg) {
  const int64_t H = cfg.hidden_size, A = cfg.num_attention_heads;
  TANDEM_CHECK(A > 0 && H % A == 0, "BertSelfAttention: hidden_size ", H, " must be a multiple of num_attention_heads ",
               A);
  // Heads split whole: rank r holds heads [r A/T, (r + 1) A/T), i.e. query/key/value rows
  // [r H/T, (r + 1) H/T) (nn.Linear lays the heads out head-major).
  local_heads_ = even_shard(A, comm.rank(), comm.size(), "num_attention_heads").size;
  ColumnParallelOptions o;
  query_ = register_module("query", std::make_shared<ColumnParallelLinear>(H, H, comm, o, nullptr));
  key_ = register_module("key", std::make_shared<ColumnParallelLinear>(H, H, comm, o, nullptr));
  value_ = register_module("value", std::make_shared<ColumnParallelLinear>(H, H, comm, o, nullptr));
}

Tensor TpBertSelfAttention::forward_impl(const Tensor& x, const Tensor& attention_mask) {
  // One f for the three projections, then one [3H/T, H] GEMM over this rank's rows of each, and
  // attention on this rank's heads, drawing dropout from this rank's stream.
  return fused_qkv_attention(copy_to_tp_region(x, *comm_), {query_->weight(), key_->weight(), value_->weight()},
                             {query_->bias(), key_->bias(), value_->bias()}, local_heads_, attention_mask,
                             attention_options(cfg_, is_training()), *gen_);
}

// ---- layer ----

TpBertLayer::TpBertLayer(const BertConfig& cfg, Communicator& comm, Generator& dropout, Generator& attention_dropout)
    : EncoderLayer(cfg, std::make_shared<TpBertSelfAttention>(cfg, comm, attention_dropout),
                   std::make_shared<TpBertResidualOutput>(cfg, cfg.hidden_size, comm, dropout, "BertSelfOutput"),
                   std::make_shared<ColumnParallelLinear>(cfg.hidden_size, cfg.intermediate_size, comm,
                                                          ColumnParallelOptions{}, nullptr),
                   std::make_shared<TpBertResidualOutput>(cfg, cfg.intermediate_size, comm, dropout, "BertOutput")),
      comm_(&comm) {}

Tensor TpBertLayer::ffn_input(const Tensor& in) { return copy_to_tp_region(in, *comm_); }

// ---- the model ----

TpBertForMaskedLM::TpBertForMaskedLM(const BertConfig& cfg, Communicator& comm, uint64_t seed, TpBertOptions options,
                                     bool init)
    : cfg_(cfg), comm_(&comm), layout_(bert_tp_layout(cfg)) {
  TANDEM_CHECK(cfg.num_hidden_layers > 0, "BertEncoder: num_hidden_layers must be positive, got ",
               cfg.num_hidden_layers);
  vocab_ = vocab_shard(cfg.vocab_size, comm.rank(), comm.size());
  attention_gen_ = std::make_unique<Generator>(seed + TpBertOptions::kAttentionSeedOffset + comm.rank());
  Generator& dropout = options.replicated_dropout ? *options.replicated_dropout : default_generator();
  auto bert = register_module("bert", std::make_shared<ModuleHolder>("BertModel"));
  embeddings_ = bert->register_module("embeddings", std::make_shared<TpBertEmbeddings>(cfg, comm, dropout));
  auto encoder = bert->register_module("encoder", std::make_shared<ModuleHolder>("BertEncoder"));
  auto list = encoder->register_module("layer", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i)
    layers_.push_back(list->add(std::make_shared<TpBertLayer>(cfg, comm, dropout, *attention_gen_)));
  if (cfg.pre_layer_norm)
    final_ln_ = encoder->register_module("ln", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
  auto cls = register_module("cls", std::make_shared<ModuleHolder>("BertOnlyMLMHead"));
  auto predictions = cls->register_module("predictions", std::make_shared<ModuleHolder>("BertLMPredictionHead"));
  head_bias_ = predictions->register_parameter("bias", Tensor::zeros({vocab_.size}));
  transform_ = predictions->register_module("transform", std::make_shared<BertPredictionHeadTransform>(cfg));
  if (init) {
    Generator gen(seed);
    hf_init_shards(*this, cfg, gen);
  }
}

Tensor TpBertForMaskedLM::hidden(const Tensor& input_ids, const Tensor& attention_mask,
                                 const Tensor& token_type_ids) {
  if (attention_mask.defined())
    TANDEM_CHECK(attention_mask.shape() == input_ids.shape(), "BertModel: attention_mask ", attention_mask.str(),
                 " must have the shape of input_ids ", input_ids.str(), " (1 = token, 0 = padding)");
  Tensor h = embeddings_->forward(input_ids, token_type_ids);
  for (auto& layer : layers_) h = layer->forward(h, attention_mask);
  return final_ln_ ? (*final_ln_)(h) : h;
}

Tensor TpBertForMaskedLM::head(const Tensor& h) {
  // The decoder is the tied word-embedding shard: logits for this rank's vocabulary rows only.
  return ops::linear(copy_to_tp_region((*transform_)(h), *comm_), embeddings_->word().weight(), head_bias_);
}

Tensor TpBertForMaskedLM::forward(const Tensor& input_ids, const Tensor& attention_mask,
                                  const Tensor& token_type_ids) {
  return head(hidden(input_ids, attention_mask, token_type_ids));
}

Tensor TpBertForMaskedLM::mlm_loss(const Tensor& input_ids, const Tensor& attention_mask,
                                   const Tensor& token_type_ids, const Tensor& labels, int64_t ignore_index) {
  const models::MaskedRows r =
      models::masked_rows(hidden(input_ids, attention_mask, token_type_ids), input_ids, labels, ignore_index);
  if (r.m == 0) return ops::scale(ops::sum(r.flat), 0.0f);  // nothing labelled: 0, as BertForMaskedLM (no collective)
  return vocab_parallel_cross_entropy(head(r.picked), r.labels, vocab_.start, cfg_.vocab_size, *comm_);
}

Tensor TpBertForMaskedLM::masked_logits(const Tensor& input_ids, const Tensor& attention_mask,
                                        const Tensor& token_type_ids, const Tensor& rows) {
  const Tensor logits = forward(input_ids, attention_mask, token_type_ids);  // [B, S, Vr]
  const int64_t n = logits.size(0) * logits.size(1);
  const Tensor picked = ops::embedding(rows, ops::reshape(logits, {n, logits.size(2)}));  // row gather
  return whole_vocabulary(ops::cast_raw(picked, DType::F32), cfg_.vocab_size, *comm_);  // AMP: 16-bit logits
}

// ---- the canonical model (checkpoints) ----

int64_t TpBertForMaskedLM::canonical_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) {
    const auto it = layout_.find(name);
    n += it == layout_.end() ? p.numel() : p.numel() / p.size(it->second.dim) * it->second.full;
  }
  return n;
}

void TpBertForMaskedLM::with_canonical(const std::function<void(const Module&)>& use) {
  const NamedTensors whole = canonical_state_dict(tensors_of(*this));  // every rank of the group
  if (comm_->rank() != 0) return;
  models::BertForMaskedLM canonical(cfg_, 0, /*init=*/false);  // every tensor is overwritten below
  // The shards' dtypes: under AMP the 16-bit weights, as cast_for_amp leaves the unsplit model (the
  // same policy on both sides); else the one dtype the model was moved to (f32, or f64 in tests).
  const NamedTensors params = named_parameters();
  DType dtype = params.front().second.dtype();
  for (const auto& [name, p] : params)
    if (autocast::is_16bit(p.dtype())) dtype = p.dtype();
  if (autocast::is_16bit(dtype)) cast_for_amp(canonical, dtype);
  else if (dtype != DType::F32) canonical.to(dtype);
  std::map<std::string, Tensor> by_name(whole.begin(), whole.end());
  const NamedTensors want = tensors_of(canonical);
  TANDEM_CHECK(want.size() == by_name.size(), "TpBertForMaskedLM: the assembled model has ", by_name.size(),
               " tensors, BertForMaskedLM ", want.size());
  for (const auto& [name, t] : want) {
    const auto it = by_name.find(name);
    TANDEM_CHECK(it != by_name.end() && it->second.shape() == t.shape() && it->second.dtype() == t.dtype(),
                 "TpBertForMaskedLM: the assembled '", name, "' does not match BertForMaskedLM's ", t.str());
    Tensor(t).copy_(it->second);
  }
  use(canonical);
}

NamedTensors TpBertForMaskedLM::local_state_dict(NamedTensors canonical) const {
  return shard_state_dict(canonical, layout_, comm_->rank(), comm_->size());
}

NamedTensors TpBertForMaskedLM::canonical_state_dict(NamedTensors mine) {
  return gather_state_dict(mine, layout_, *comm_);
}

std::map<std::string, std::string> TpBertForMaskedLM::extra_state() const {
  return {{"tp", std::to_string(comm_->size())}, {"tp_attention_rng_offset", std::to_string(attention_gen_->offset())}};
}

void TpBertForMaskedLM::set_extra_state(const std::map<std::string, std::string>& extra) {
  const auto tp = extra.find("tp"), offset = extra.find("tp_attention_rng_offset");
  if (tp != extra.end() && tp->second == std::to_string(comm_->size()) && offset != extra.end())
    attention_gen_->set_state(attention_gen_->seed(), std::stoull(offset->second));
}

}  // namespace tandem::dist::tp
