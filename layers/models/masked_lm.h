// layers/models/masked_lm.h: the masked language model a trainer holds - whole on this rank
// (BertForMaskedLM, layers/models/bert.h) or split across a tensor-parallel group
// (dist::tp::TpBertForMaskedLM, dist/tp/bert.h) - behind one interface, so that train_encoder's
// loss, validation, EMA and checkpoints call one thing whatever the layout.
//
// "Canonical" is the whole model as Hugging Face names and shapes it: what a checkpoint holds for
// any TP size. A whole model is its own canonical form; a split one maps its shards to and from it
// (the collective side over its group is its own business, in dist/tp/). The optimizer's state is
// not the model's: the training step maps it (apps/trainer/step/strategy_tp.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/safetensors.h"  // defines: NamedTensors
#include "layers/transformer.h"  // defines: BertConfig

namespace tandem::models {

class MaskedLM : public Module {
 public:
  // The canonical model's config (a split model's too: its sizes are the unsplit ones).
  virtual const BertConfig& config() const = 0;
  // The canonical model's parameter count, the tied decoder once.
  virtual int64_t canonical_parameters() const = 0;
  // Masked-LM loss: the mean cross-entropy over positions whose label is not ignore_index, the
  // same value on every rank of a split model's group.
  virtual Tensor mlm_loss(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                          const Tensor& labels, int64_t ignore_index = -100) = 0;
  // The whole-vocabulary logits [m, V] of the flat positions `rows` (i64 [m], indices into the
  // batch's B*S tokens), identical on every rank of a group; in the model's output dtype (f32 from
  // a split model, whose gather runs in f32). For validation: computes every position's logits.
  virtual Tensor masked_logits(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                               const Tensor& rows) = 0;

  // --- checkpoints (canonical files, any TP size)
  // Calls `use` with the canonical model holding this model's weights (a checkpoint's writer): a
  // whole model with itself; a split model assembles one over its group - collective, every rank of
  // the group calls it - and calls `use` on the group's rank 0 only, freeing it after.
  virtual void with_canonical(const std::function<void(const Module&)>& use) = 0;
  // Tensors keyed by this model's parameters (a state dict's, or the EMA's "ema.<param>"), from the
  // canonical ones to this model's and back: as they are for a whole model; a split one keeps this
  // rank's shards (local, not collective) and assembles them over its group (canonical: collective,
  // every rank of the group calls it and gets them all).
  virtual safetensors::NamedTensors local_state_dict(safetensors::NamedTensors canonical) const { return canonical; }
  virtual safetensors::NamedTensors canonical_state_dict(safetensors::NamedTensors mine) { return mine; }
  // State that is neither a parameter nor a buffer (PyTorch's get_extra_state / set_extra_state), as
  // a checkpoint's "extra" strings: a split model's own dropout stream. Empty for a whole model.
  virtual std::map<std::string, std::string> extra_state() const { return {}; }
  virtual void set_extra_state(const std::map<std::string, std::string>& /*extra*/) {}
};

}  // namespace tandem::models
