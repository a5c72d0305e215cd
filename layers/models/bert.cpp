// layers/models/bert.cpp: the BERT sizes, BertForMaskedLM and HF's init.
#include "layers/models/bert.h"

#include <utility>
#include <vector>

#include "core/ops/embedding/embedding.h"
#include "core/ops/loss/loss.h"
#include "core/ops/shape/shape.h"

namespace tandem::models {
namespace {

struct Size {
  const char* name;
  int64_t layers, hidden, heads;
};
constexpr Size kSizes[] = {{"bert_tiny", 2, 128, 2},    {"bert_mini", 4, 256, 4},   {"bert_small", 4, 512, 8},
                           {"bert_medium", 8, 512, 8},  {"bert_base", 12, 768, 12}, {"bert_large", 24, 1024, 16}};

// HF BertPreTrainedModel._init_weights, walked in module order so the draws depend only on the
// structure and the seed.
void hf_init(Module& model, const BertConfig& cfg, Generator& gen) {
  for (auto& [name, m] : model.named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      Tensor w = lin->weight();
      normal_(w, 0.0, cfg.initializer_range, gen);
      if (lin->bias().defined()) Tensor(lin->bias()).zero_();
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      Tensor w = emb->weight();
      normal_(w, 0.0, cfg.initializer_range, gen);
      if (name == "bert.embeddings.word_embeddings") w.detach().slice(0, 1).zero_();  // pad_token_id = 0
    } else {
      m->reset_parameters(gen);  // LayerNorm: weight 1, bias 0
    }
  }
}

}  // namespace

bool is_bert_name(const std::string& name) {
  for (const Size& s : kSizes)
    if (name == s.name) return true;
  return false;
}

BertConfig bert_config(const std::string& name, int64_t vocab_size) {
  TANDEM_CHECK(vocab_size > 0, "bert_config: vocab_size must be positive, got ", vocab_size);
  for (const Size& s : kSizes) {
    if (name != s.name) continue;
    BertConfig c;
    c.vocab_size = vocab_size;
    c.num_hidden_layers = s.layers;
    c.hidden_size = s.hidden;
    c.num_attention_heads = s.heads;
    c.intermediate_size = 4 * s.hidden;
    return c;
  }
  std::string valid;
  for (const Size& s : kSizes) valid += (valid.empty() ? "" : ", ") + std::string(s.name);
  TANDEM_THROW("unknown BERT size \"", name, "\"; valid names are: ", valid);
}

BertForMaskedLM::BertForMaskedLM(const BertConfig& cfg, uint64_t seed, bool init) : cfg_(cfg) {
  bert_ = register_module("bert", std::make_shared<BertModel>(cfg));
  cls_ = register_module("cls", std::make_shared<BertOnlyMLMHead>(cfg, bert_->embeddings().word_weight()));
  if (init) {
    Generator gen(seed);
    hf_init(*this, cfg, gen);
  }
}

Tensor BertForMaskedLM::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  return (*cls_)(bert_->forward(input_ids, attention_mask, token_type_ids));
}

Tensor BertForMaskedLM::mlm_loss(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                                 const Tensor& labels, int64_t ignore_index) {
  const MaskedRows r = masked_rows(bert_->forward(input_ids, attention_mask, token_type_ids), input_ids, labels,
                                   ignore_index);
  if (r.m == 0)  // 0, see core/ops/loss/loss.h
    return ops::cross_entropy(r.flat, labels.view({r.flat.size(0)}), 0.0f, ignore_index);
  return ops::cross_entropy((*cls_)(r.picked), r.labels);
}

Tensor BertForMaskedLM::masked_logits(const Tensor& input_ids, const Tensor& attention_mask,
                                      const Tensor& token_type_ids, const Tensor& rows) {
  const Tensor logits = forward(input_ids, attention_mask, token_type_ids);
  const int64_t n = logits.size(0) * logits.size(1);
  return ops::embedding(rows, ops::reshape(logits, {n, logits.size(2)}));  // embedding lookup = row gather
}

MaskedRows masked_rows(const Tensor& h, const Tensor& input_ids, const Tensor& labels, int64_t ignore_index) {
  TANDEM_CHECK(labels.shape() == input_ids.shape(), "BertForMaskedLM::mlm_loss: labels ", labels.str(),
               " must have the shape of input_ids ", input_ids.str(), " (", ignore_index, " = not predicted)");
  const int64_t n = h.size(0) * h.size(1);
  std::vector<int64_t> lab = labels.to_vector_i64(), rows, kept;  // one small host copy per step
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] == ignore_index) continue;
    rows.push_back(i);
    kept.push_back(lab[i]);
  }
  MaskedRows r;
  r.m = static_cast<int64_t>(rows.size());
  r.flat = ops::reshape(h, {n, h.size(2)});
  if (r.m == 0) return r;
  r.picked = ops::embedding(Tensor::from_vector_i64(rows, {r.m}, DType::I64, h.device()), r.flat);  // [m, H]
  r.labels = Tensor::from_vector_i64(kept, {r.m}, DType::I64, h.device());
  return r;
}

}  // namespace tandem::models
