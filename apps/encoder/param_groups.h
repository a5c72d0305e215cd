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
//
// Three ways to build it, one per trainer mode (the groups split by the name either way):
//   - parameters: plain DDP, each optimizer updates its whole parameters in place;
//   - segments (--amp): AMP's f32 master segments (optim/amp.h); the loop hands the unscaled master
//     gradients over with set_grads, in the segments' order;
//   - a dist::Zero (--zero 1|2): this rank's shard segments, which carry the parameter's name, so
//     the rule applies per element range as per parameter. Then zero_grad, clipping (one all-reduce
//     of the squares), step (followed by the parameter all-gather) and state (a collective gather of
//     the unsharded state, onto rank 0) go through the Zero. The tied decoder weight is the word
//     embedding's parameter (layers/models/bert.h), so it is one segment list, decayed once.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/zero.h"  // defines: Zero
#include "optim/optimizer.h"

namespace tandem::apps::encoder {

// True for parameters BERT trains without weight decay.
bool no_weight_decay(const std::string& name);

class ParamGroups {
 public:
  // kind: "adamw" or "lamb"; opt.weight_decay is the decay group's.
  ParamGroups(const std::string& kind, const optim::NamedTensors& params, const optim::OptimizerOptions& opt);
  // Over segments (AMP's masters). num_params: the length of the list the segments' param_index
  // refers to (-1 indices: positions in each group).
  ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> segments, int64_t num_params,
              const optim::OptimizerOptions& opt);
  // Over this rank's ZeRO shard (`zero` must outlive this); LAMB's norms are summed across ranks,
  // so for LAMB every rank must hold some of both groups (checked, collectively).
  ParamGroups(const std::string& kind, dist::Zero& zero, optim::OptimizerOptions opt);
  // Over AMP's f32 masters of this rank's ZeRO shard (--amp with --zero; `masters` are
  // MasterWeights::master_segments() over zero.segments()): clipping, state and zero_grad go through
  // the Zero as above, but step() does not gather - the loop copies the masters into the 16-bit
  // parameters first, then calls zero.gather_parameters().
  ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> masters, dist::Zero& zero,
              optim::OptimizerOptions opt);

  void set_lr(double lr);
  double lr() const { return decay_->lr(); }
  void zero_grad();
  // Both groups' updates; under ZeRO then every rank's updated slices to every rank.
  void step();
  // Gradients for the segments, in the order they were given (AMP's master gradients).
  void set_grads(const std::vector<Tensor>& grads);
  // Clips all gradients by their global L2 norm (max_norm > 0); returns the norm before clipping.
  double clip_grad_norm(double max_norm) const;
  // The unsharded state. Under ZeRO collective: call it on every rank; only rank 0 gets the tensors.
  optim::NamedTensors state() const;
  void load_state(const optim::NamedTensors& state);
  const char* name() const { return decay_->name(); }

 private:
  std::unique_ptr<optim::Optimizer> decay_, no_decay_;
  std::vector<std::string> no_decay_names_;  // the no_decay group's parameter names
  std::vector<bool> seg_no_decay_;           // segment constructors: each segment's group, in order
  dist::Zero* zero_ = nullptr;
  bool gather_in_step_ = false;  // f32 ZeRO: step() ends with the all-gather (AMP: the loop does)
};

}  // namespace tandem::apps::encoder
