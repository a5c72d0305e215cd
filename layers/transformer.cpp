// layers/transformer.cpp: BERT's embeddings, encoder layers and masked-LM head (see transformer.h).
#include "layers/transformer.h"

#include "core/ops/ops.h"
#include "core/profile.h"

namespace tandem {

ops::AttentionOptions attention_options(const BertConfig& cfg, bool training) {
  ops::AttentionOptions opt;
  opt.dropout_p = static_cast<float>(cfg.attention_probs_dropout_prob);
  opt.training = training;
  opt.backend = cfg.attention_backend;
  opt.mask_right_padded = cfg.attention_mask_right_padded;
  return opt;
}

Tensor ModuleHolder::forward(const Tensor&) {
  TANDEM_THROW(type_, " has no forward of its own: its owner runs its modules (iterate over a ModuleList)");
}

// ---- embeddings ----

BertEmbeddings::BertEmbeddings(const BertConfig& cfg)
    : OptionalInputModule("BertEmbeddings"), max_pos_(cfg.max_position_embeddings) {
  // Weights are drawn by the model's init (layers/models/bert.cpp), not here: gen = nullptr.
  word_ = register_module("word_embeddings", std::make_shared<Embedding>(cfg.vocab_size, cfg.hidden_size, nullptr));
  position_ = register_module("position_embeddings",
                              std::make_shared<Embedding>(cfg.max_position_embeddings, cfg.hidden_size, nullptr));
  token_type_ = register_module("token_type_embeddings",
                                std::make_shared<Embedding>(cfg.type_vocab_size, cfg.hidden_size, nullptr));
  norm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(cfg.hidden_dropout_prob));
}

Tensor BertEmbeddings::position_ids(int64_t seq, Device d) {
  if (!pos_ids_.defined() || pos_ids_.size(0) != seq || pos_ids_.device() != d) {
    std::vector<int64_t> ids(static_cast<size_t>(seq));
    for (int64_t i = 0; i < seq; ++i) ids[i] = i;
    pos_ids_ = Tensor::from_vector_i64(ids, {seq}, DType::I64, d);
  }
  return pos_ids_;
}

Tensor BertEmbeddings::forward_impl(const Tensor& input_ids, const Tensor& token_type_ids) {
  TANDEM_CHECK(input_ids.dim() == 2, "BertEmbeddings: input_ids must be [batch, seq], got ", input_ids.str());
  const int64_t S = input_ids.size(1);
  TANDEM_CHECK(S <= max_pos_, "BertEmbeddings: sequence length ", S, " exceeds max_position_embeddings = ",
               max_pos_, "; truncate the input or build the model with a larger max_position_embeddings");
  Tensor h = (*word_)(input_ids);                                    // [B, S, H]
  h = ops::add(h, (*position_)(position_ids(S, input_ids.device())));  // + [S, H], broadcast over B
  if (token_type_ids.defined()) {
    TANDEM_CHECK(token_type_ids.shape() == input_ids.shape(), "BertEmbeddings: token_type_ids ",
                 token_type_ids.str(), " must have the shape of input_ids ", input_ids.str());
    h = ops::add(h, (*token_type_)(token_type_ids));
  } else {
    // HF's default: every token in segment 0. One row, broadcast over [B, S].
    Tensor zero = position_ids(S, input_ids.device()).slice(0, 1);  // position 0 is the id 0
    h = ops::add(h, ops::reshape((*token_type_)(zero), {h.size(2)}));
  }
  return (*dropout_)((*norm_)(h));
}

// ---- attention ----

Tensor fused_qkv_attention(const Tensor& x, const std::array<Tensor, 3>& w, const std::array<Tensor, 3>& b,
                           int64_t heads, const Tensor& attention_mask, const ops::AttentionOptions& opt,
                           Generator& gen) {
  TANDEM_CHECK(x.dim() == 3, "BertSelfAttention: expects [batch, seq, hidden], got ", x.str());
  const int64_t rows = w[0].size(0), in = w[0].size(1);
  // One [3 rows, in] GEMM: the weights are concatenated as flat rows (see transformer.h for the cost).
  auto flat = [&](const Tensor& t) { return ops::reshape(t, {1, rows * in}); };
  Tensor wqkv = ops::reshape(ops::concat_channels({flat(w[0]), flat(w[1]), flat(w[2])}), {3 * rows, in});
  Tensor bqkv = ops::concat_channels({b[0], b[1], b[2]});
  return ops::attention_qkv(ops::linear(x, wqkv, bqkv), heads, attention_mask, opt, gen);
}

BertSelfAttention::BertSelfAttention(const BertConfig& cfg)
    : OptionalInputModule("BertSelfAttention"), heads_(cfg.num_attention_heads), cfg_(cfg) {
  TANDEM_CHECK(heads_ > 0 && cfg.hidden_size % heads_ == 0, "BertSelfAttention: hidden_size ", cfg.hidden_size,
               " must be a multiple of num_attention_heads ", heads_);
  const int64_t H = cfg.hidden_size;
  query_ = register_module("query", std::make_shared<Linear>(H, H, true, nullptr));
  key_ = register_module("key", std::make_shared<Linear>(H, H, true, nullptr));
  value_ = register_module("value", std::make_shared<Linear>(H, H, true, nullptr));
}

Tensor BertSelfAttention::forward_impl(const Tensor& x, const Tensor& attention_mask) {
  return fused_qkv_attention(x, {query_->weight(), key_->weight(), value_->weight()},
                             {query_->bias(), key_->bias(), value_->bias()}, heads_, attention_mask,
                             attention_options(cfg_, is_training()));
}

// ---- layer, encoder, model ----

BertLayer::BertLayer(const BertConfig& cfg)
    : EncoderLayer(cfg, std::make_shared<BertSelfAttention>(cfg),
                   std::make_shared<BertResidualOutput>(cfg, cfg.hidden_size, "BertSelfOutput"),
                   std::make_shared<Linear>(cfg.hidden_size, cfg.intermediate_size, true, nullptr),
                   std::make_shared<BertResidualOutput>(cfg, cfg.intermediate_size, "BertOutput")) {}

BertEncoder::BertEncoder(const BertConfig& cfg) : OptionalInputModule("BertEncoder") {
  TANDEM_CHECK(cfg.num_hidden_layers > 0, "BertEncoder: num_hidden_layers must be positive, got ",
               cfg.num_hidden_layers);
  auto list = register_module("layer", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) layers_.push_back(list->add(std::make_shared<BertLayer>(cfg)));
  if (cfg.pre_layer_norm)
    final_ln_ = register_module("ln", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
}

Tensor BertEncoder::forward_impl(const Tensor& x, const Tensor& attention_mask) {
  Tensor h = x;
  // Through call(): each layer's forward hooks see it (ZeRO-3 gathers a layer's weights there, dist/zero3.h).
  for (auto& layer : layers_) h = layer->call([&] { return layer->forward(h, attention_mask); });
  return final_ln_ ? (*final_ln_)(h) : h;
}

BertModel::BertModel(const BertConfig& cfg) {
  embeddings_ = register_module("embeddings", std::make_shared<BertEmbeddings>(cfg));
  encoder_ = register_module("encoder", std::make_shared<BertEncoder>(cfg));
}

Tensor BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  if (attention_mask.defined())
    TANDEM_CHECK(attention_mask.shape() == input_ids.shape(), "BertModel: attention_mask ", attention_mask.str(),
                 " must have the shape of input_ids ", input_ids.str(), " (1 = token, 0 = padding)");
  return encoder_->forward(embeddings_->forward(input_ids, token_type_ids), attention_mask);
}

// ---- masked-LM head ----

BertPredictionHeadTransform::BertPredictionHeadTransform(const BertConfig& cfg) {
  dense_ = register_module("dense", std::make_shared<Linear>(cfg.hidden_size, cfg.hidden_size, true, nullptr));
  norm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
}

Tensor BertPredictionHeadTransform::forward(const Tensor& h) { return (*norm_)(ops::gelu((*dense_)(h))); }

BertLMPredictionHead::BertLMPredictionHead(const BertConfig& cfg, Tensor tied_word_weight)
    : decoder_weight_(std::move(tied_word_weight)) {
  TANDEM_CHECK(decoder_weight_.defined() && decoder_weight_.dim() == 2 && decoder_weight_.size(0) == cfg.vocab_size &&
                   decoder_weight_.size(1) == cfg.hidden_size,
               "BertLMPredictionHead: the tied word-embedding weight must be [vocab_size, hidden_size] = [",
               cfg.vocab_size, ", ", cfg.hidden_size, "]");
  bias_ = register_parameter("bias", Tensor::zeros({cfg.vocab_size}));
  transform_ = register_module("transform", std::make_shared<BertPredictionHeadTransform>(cfg));
}

Tensor BertLMPredictionHead::forward(const Tensor& h) {
  // The tied weight is the embedding's own TensorImpl: Module::to() moves it in place, so this
  // handle follows device and dtype changes, and both uses' gradients accumulate into one .grad.
  return ops::linear((*transform_)(h), decoder_weight_, bias_);
}

BertOnlyMLMHead::BertOnlyMLMHead(const BertConfig& cfg, Tensor tied_word_weight) {
  predictions_ = register_module("predictions", std::make_shared<BertLMPredictionHead>(cfg, std::move(tied_word_weight)));
}

}  // namespace tandem
