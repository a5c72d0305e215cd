// layers/transformer.h: the BERT encoder's building blocks, with Hugging Face's module names.
//
// The tree mirrors transformers' BertModel (add_pooling_layer=False), so named_parameters() gives
// HF's names once the model prefixes "bert." (layers/models/bert.h):
//   embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
//   encoder.layer.<i>.attention.self.{query, key, value}
//   encoder.layer.<i>.attention.output.{dense, LayerNorm}
//   encoder.layer.<i>.intermediate.dense       encoder.layer.<i>.output.{dense, LayerNorm}
// Activations are [B, S, hidden]; attention_mask is HF's [B, S] (1 = token, 0 = padding, any dtype;
// undefined = no padding) and masks keys only (core/ops/attention/attention.h), so padded query rows still
// produce (ignored) outputs, as in HF.
//
// Fused QKV: query/key/value stay three Linear modules - the storage IS HF's names, so checkpoints
// and optimizers see plain [H, H] tensors - and the forward concatenates the three weights and
// biases into one [3H, H] GEMM (ops::concat_channels on flat views). The concat copies 3H^2 values
// per layer per step (3 M for BERT-large, ~0.1% of the layer's GEMM traffic at B*S = 4096 tokens),
// which buys one large GEMM instead of three and no name mapping at checkpoint time.
//
// post-LN (BERT, the default): h = LN(x + Dropout(Sublayer(x))).
// pre-LN (BertConfig::pre_layer_norm): h = x + Dropout(Sublayer(LN(x))), reusing the same
// LayerNorm slots (attention.output.LayerNorm normalises the attention input, output.LayerNorm the
// feed-forward input), plus one final LayerNorm after the last layer, named encoder.ln as in
// Megatron-BERT; it trains deep stacks without warm-up tricks (Xiong et al., 2020).
//
// Each class has forward(x) for the Module interface (no mask) and a typed forward with the extra
// inputs, which the parent calls directly (OptionalInputModule below gives both).
//
// Attention runs on the fused projection's output in place (ops::attention_qkv): on CUDA f16/bf16
// that is cuDNN's fused SDPA reading q, k, v through strides and writing [B, S, H] directly, so
// the step has no head split, merge or transpose. It needs the mask's padding on the right
// (BertConfig::attention_mask_right_padded, true as the tokenizers pad; checked on the CPU).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/attention/attention.h"
#include "core/ops/fused_bias/fused_bias.h"
#include "core/ops/matmul/matmul.h"
#include "core/profile.h"
#include "layers/layers.h"

namespace tandem {

// Hugging Face's BertConfig fields (same names, same defaults as bert-base-uncased).
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;     // 4 * hidden_size in every published BERT
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;      // std of the N(0, std) init of every Linear and Embedding
  bool pre_layer_norm = false;          // see the header comment
  ops::AttentionBackend attention_backend = ops::AttentionBackend::Auto;
  // Every attention_mask row is 1...1 0...0 with at least one token (what tokenizers and
  // data/text_dataset.cpp produce): lets Auto run cuDNN's fused attention with a mask
  // (AttentionOptions::mask_right_padded). false keeps masked attention on the reference path.
  bool attention_mask_right_padded = true;
};

// attention_backend, attention_probs_dropout_prob and attention_mask_right_padded as the options
// of one attention call (training: the module's mode).
ops::AttentionOptions attention_options(const BertConfig& cfg, bool training);

// A container that only names its children (HF's BertAttention, BertIntermediate, ...): its owner
// runs them, so its own forward is an error.
class ModuleHolder : public Module {
 public:
  explicit ModuleHolder(std::string type) : type_(std::move(type)) {}
  Tensor forward(const Tensor& x) override;  // an error: the owner runs the children
  std::string type_name() const override { return type_; }
  using Module::register_module;
  using Module::register_parameter;

 private:
  std::string type_;
};

// A module whose forward takes a second, optional input (the attention mask, or the token types):
// forward(x) for the Module interface passes none. Subclasses implement forward_impl.
class OptionalInputModule : public Module {
 public:
  Tensor forward(const Tensor& x, const Tensor& extra) { return forward_impl(x, extra); }
  Tensor forward(const Tensor& x) override { return forward_impl(x, Tensor()); }
  std::string type_name() const override { return type_; }

 protected:
  explicit OptionalInputModule(std::string type) : type_(std::move(type)) {}
  virtual Tensor forward_impl(const Tensor& x, const Tensor& extra) = 0;

 private:
  std::string type_;
};

// BertSelfAttention's computation, shared with the tensor-parallel twin (dist/tp/bert.h): one
// GEMM of x [B, S, in] against the concatenated query/key/value weights w [3][rows, in] and biases
// b [3][rows] (the concat copies them: see the header comment), then attention on the fused
// output in place -> [B, S, rows] over `heads` heads.
Tensor fused_qkv_attention(const Tensor& x, const std::array<Tensor, 3>& w, const std::array<Tensor, 3>& b,
                           int64_t heads, const Tensor& attention_mask, const ops::AttentionOptions& opt,
                           Generator& gen = default_generator());

// Holds numbered children "0", "1", ... for a parent that calls them itself (torch.nn.ModuleList).
// The children live only in Module's list; add() hands back the typed handle.
class ModuleList : public ModuleHolder {
 public:
  ModuleList() : ModuleHolder("ModuleList") {}
  template <class M>
  Child<M> add(std::shared_ptr<M> m) {
    return register_module(std::to_string(num_children()), std::move(m));
  }
  size_t size() const { return num_children(); }
};

class BertEmbeddings : public OptionalInputModule {
 public:
  explicit BertEmbeddings(const BertConfig& cfg);
  const Tensor& word_weight() const { return word_->weight(); }

 private:
  Tensor position_ids(int64_t seq, Device d);
  Child<Embedding> word_, position_, token_type_;
  Child<LayerNorm> norm_;
  Child<Dropout> dropout_;
  int64_t max_pos_;
  Tensor pos_ids_;  // [S] cached 0..S-1 on the last device used, so a step does no host copy
  // input_ids [B, S] (i32/i64), token_type_ids [B, S] or undefined (all segment 0) -> [B, S, H].
  Tensor forward_impl(const Tensor& input_ids, const Tensor& token_type_ids) override;
};

class BertSelfAttention : public OptionalInputModule {
 public:
  explicit BertSelfAttention(const BertConfig& cfg);

 private:
  // x [B, S, H] -> context [B, S, H] (before the output projection).
  Tensor forward_impl(const Tensor& x, const Tensor& attention_mask) override;
  Child<Linear> query_, key_, value_;
  int64_t heads_;
  BertConfig cfg_;
};

// dense + dropout + residual, with LayerNorm after (post-LN) or none here (pre-LN; see above).
// The dense GEMM without its bias, then the bias, the dropout and the residual add in one pass, and
// in backward the bias gradient from the weight-gradient GEMM's epilogue (ops::linear_bias_dropout_add;
// the same masks as the Dropout module would draw); BertLayer likewise runs intermediate.dense as
// ops::linear_bias_gelu. Used for both attention.output (BertSelfOutput) and output (BertOutput):
// HF's two classes differ only in the dense layer's input width.
// The tensor-parallel twin (dist/tp/bert.h) is the same template on a RowParallelLinear: Dense
// needs a dense_bias_dropout_add(dense, h, residual, p, training, gen) found by argument-dependent
// lookup (the row-parallel one all-reduces the GEMM before the bias, so it cannot take the fused
// linear op and runs ops::bias_dropout_add after it).
inline Tensor dense_bias_dropout_add(Linear& dense, const Tensor& h, const Tensor& residual, float p, bool training,
                                     Generator& gen) {
  return ops::linear_bias_dropout_add(h, dense.weight(), dense.bias(), residual, p, training, gen);
}

template <class Dense>
class ResidualOutput : public Module {
 public:
  // Registers dense, LayerNorm and dropout (HF's order); dropout draws from `dropout_gen`.
  ResidualOutput(const BertConfig& cfg, std::shared_ptr<Dense> dense, Generator& dropout_gen, std::string type)
      : pre_ln_(cfg.pre_layer_norm), type_(std::move(type)) {
    dense_ = register_module("dense", std::move(dense));
    norm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(cfg.hidden_dropout_prob, &dropout_gen));
  }
  Tensor forward(const Tensor& h, const Tensor& residual) {
    // See above; the modules keep HF's names and parameters.
    Tensor y = dense_bias_dropout_add(*dense_, h, residual, static_cast<float>(dropout_->p()), is_training(),
                                      dropout_->generator());
    return pre_ln_ ? y : (*norm_)(y);
  }
  Tensor forward(const Tensor&) override {
    TANDEM_THROW(type_, " needs the residual input: call forward(hidden, residual)");
  }
  std::string type_name() const override { return type_; }
  LayerNorm& norm() { return *norm_; }

 private:
  Child<Dense> dense_;
  Child<LayerNorm> norm_;
  Child<Dropout> dropout_;
  bool pre_ln_;
  std::string type_;
};

class BertResidualOutput : public ResidualOutput<Linear> {
 public:
  BertResidualOutput(const BertConfig& cfg, int64_t in_features, std::string type)
      : ResidualOutput(cfg, std::make_shared<Linear>(in_features, cfg.hidden_size, true, nullptr), default_generator(),
                       std::move(type)) {}
};

// BertLayer's wiring and forward, shared with the tensor-parallel twin (dist/tp/bert.h), which
// gives other child types and overrides ffn_input(). HF's BertAttention ("attention": "self" and
// "output") and BertIntermediate ("intermediate": "dense") are containers with no computation of
// their own, so this layer runs their children.
template <class SelfAttention, class Output, class Intermediate>
class EncoderLayer : public OptionalInputModule {
 protected:
  Tensor forward_impl(const Tensor& x, const Tensor& attention_mask) override {
    const std::string label = "BertLayer " + name();  // the layer index, so a trace tells layers apart
    profile::Range range(label.c_str(), profile::Level::Layer);
    // intermediate.dense's GEMM without its bias, then bias + erf GELU in one pass, the bias gradient
    // from the weight-gradient GEMM (ops::linear_bias_gelu; core/ops/fused_bias/fused_bias.h says why
    // not a cuBLASLt GELU epilogue). The column-parallel twin's weight and bias are its local slices.
    auto feed_forward = [&](const Tensor& in) {
      return ops::linear_bias_gelu(ffn_input(in), intermediate_->weight(), intermediate_->bias());
    };
    if (pre_ln_) {
      Tensor a = attn_out_->forward(self_->forward(attn_out_->norm()(x), attention_mask), x);
      return out_->forward(feed_forward(out_->norm()(a)), a);
    }
    Tensor a = attn_out_->forward(self_->forward(x, attention_mask), x);
    return out_->forward(feed_forward(a), a);
  }
  // Registers the children in HF's order: attention.self, attention.output, intermediate.dense, output.
  EncoderLayer(const BertConfig& cfg, std::shared_ptr<SelfAttention> self, std::shared_ptr<Output> attn_out,
               std::shared_ptr<Intermediate> intermediate, std::shared_ptr<Output> out)
      : OptionalInputModule("BertLayer"), pre_ln_(cfg.pre_layer_norm) {
    auto attention = register_module("attention", std::make_shared<ModuleHolder>("BertAttention"));
    self_ = attention->register_module("self", std::move(self));
    attn_out_ = attention->register_module("output", std::move(attn_out));
    auto holder = register_module("intermediate", std::make_shared<ModuleHolder>("BertIntermediate"));
    intermediate_ = holder->register_module("dense", std::move(intermediate));
    out_ = register_module("output", std::move(out));
  }
  // What the feed-forward's first GEMM reads: the input itself here.
  virtual Tensor ffn_input(const Tensor& in) { return in; }

 private:
  Child<SelfAttention> self_;
  Child<Output> attn_out_, out_;
  Child<Intermediate> intermediate_;
  bool pre_ln_;
};

class BertLayer : public EncoderLayer<BertSelfAttention, BertResidualOutput, Linear> {
 public:
  explicit BertLayer(const BertConfig& cfg);
};

class BertEncoder : public OptionalInputModule {
 public:
  explicit BertEncoder(const BertConfig& cfg);

 private:
  Tensor forward_impl(const Tensor& x, const Tensor& attention_mask) override;
  std::vector<Child<BertLayer>> layers_;  // handles into "layer" (a ModuleList)
  Child<LayerNorm> final_ln_;  // pre-LN only
};

// BertModel without the pooler: embeddings + encoder -> last hidden state [B, S, H].
class BertModel : public Module {
 public:
  explicit BertModel(const BertConfig& cfg);
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids);
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor(), Tensor()); }
  std::string type_name() const override { return "BertModel"; }
  BertEmbeddings& embeddings() { return *embeddings_; }

 private:
  Child<BertEmbeddings> embeddings_;
  Child<BertEncoder> encoder_;
};

// cls.predictions.transform: dense -> GELU -> LayerNorm (HF's BertPredictionHeadTransform).
class BertPredictionHeadTransform : public Module {
 public:
  explicit BertPredictionHeadTransform(const BertConfig& cfg);
  Tensor forward(const Tensor& h) override;
  std::string type_name() const override { return "BertPredictionHeadTransform"; }

 private:
  Child<Linear> dense_;
  Child<LayerNorm> norm_;
};

// cls.predictions: transform, then the decoder whose weight is `tied_word_weight` (the word
// embeddings: held, not registered here, so named_parameters() lists it once and describe() counts
// it once) plus the head's own "bias" [V]. HF's state_dict also lists cls.predictions.decoder.weight
// and .bias as aliases of those two; tandem's does not, and HF re-ties them when it loads ours.
class BertLMPredictionHead : public Module {
 public:
  BertLMPredictionHead(const BertConfig& cfg, Tensor tied_word_weight);
  Tensor forward(const Tensor& h) override;  // [..., H] -> logits [..., V]
  std::string type_name() const override { return "BertLMPredictionHead"; }

 private:
  Tensor bias_, decoder_weight_;
  Child<BertPredictionHeadTransform> transform_;
};

// cls: holds "predictions" (HF's BertOnlyMLMHead).
class BertOnlyMLMHead : public Module {
 public:
  BertOnlyMLMHead(const BertConfig& cfg, Tensor tied_word_weight);
  Tensor forward(const Tensor& h) override { return (*predictions_)(h); }
  std::string type_name() const override { return "BertOnlyMLMHead"; }

 private:
  Child<BertLMPredictionHead> predictions_;
};

}  // namespace tandem
