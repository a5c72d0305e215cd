// apps/encoder/param_groups.h: BERT's two parameter groups - weight decay on the weight matrices
// and embeddings, none on biases and LayerNorm - over optim/'s group-less optimizers.
//
// optim::Optimizer has one lr and one weight decay (optim/optimizer.h leaves parameter groups out),
// so this holds two optimizers of the same kind: `decay` (weight decay --wd) and `no_decay`
// (weight decay 0). Google's BERT (AdamWeightDecayOptimizer's exclude_from_weight_decay) and Hugging
// Face's Trainer both exclude "bias" and "LayerNorm" parameters; the rule here is the same: a name
// ending in ".bias" or containing "LayerNorm". State names are per parameter ("<name>.exp_avg"), so
// the two state lists concatenate into the one an unsharded optimizer would write, and load_state
// hands each entry to the group that holds its parameter. Clipping is over the union (one global
// norm), as torch.nn.utils.clip_grad_norm_(model.parameters()).
#pragma once
#include <memory>
#include <string>

#include "optim/optimizer.h"

namespace tandem::apps::encoder {

// True for parameters BERT trains without weight decay.
bool no_weight_decay(const std::string& name);

class ParamGroups {
 public:
  // kind: "adamw" or "lamb"; opt.weight_decay is the decay group's.
  ParamGroups(const std::string& kind, const optim::NamedTensors& params, const optim::OptimizerOptions& opt);

  void set_lr(double lr);
  double lr() const { return decay_->lr(); }
  void zero_grad();
  void step();
  // Clips all gradients by their global L2 norm (max_norm > 0); returns the norm before clipping.
  double clip_grad_norm(double max_norm) const;
  optim::NamedTensors state() const;
  void load_state(const optim::NamedTensors& state);
  const char* name() const { return decay_->name(); }

 private:
  std::unique_ptr<optim::Optimizer> decay_, no_decay_;
  optim::NamedTensors no_decay_params_;
};

}  // namespace tandem::apps::encoder
