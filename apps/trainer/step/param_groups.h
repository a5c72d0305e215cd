// apps/trainer/step/param_groups.h: the Step's optimizer - two parameter groups, weight decay on every
// parameter but those a caller-given rule names - over optim/'s group-less optimizers.
// In full: apps/trainer/step/README.md ("param_groups.h in detail").
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/zero.h"        // defines: Zero
#include "layers/module.h"    // defines: Module
#include "optim/optimizer.h"  // defines: Optimizer, OptimizerOptions, ParamSegment

namespace tandem::trainer {

// True for a parameter name that trains without weight decay; null: every parameter decays.
using NoDecayRule = std::function<bool(const std::string& name)>;

// BERT's rule: biases (".bias" at the end) and LayerNorm parameters ("LayerNorm" in the name).
bool bert_no_weight_decay(const std::string& name);
// The parameters of `model`'s normalisation layers (BatchNorm2d, LayerNorm), by their full names.
NoDecayRule norm_layer_parameters(const Module& model);

class ParamGroups {
 public:
  // kind: "sgd", "adamw" or "lamb"; opt.weight_decay is the decay group's.
  ParamGroups(const std::string& kind, const optim::NamedTensors& params, const optim::OptimizerOptions& opt,
              const NoDecayRule& no_decay = {});
  // Over segments (AMP's masters). num_params: the length of the list the segments' param_index
  // refers to (-1 indices: positions in each group).
  ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> segments, int64_t num_params,
              const optim::OptimizerOptions& opt, const NoDecayRule& no_decay = {});
  // Over this rank's ZeRO shard (`zero` must outlive this); LAMB's norms are summed across ranks,
  // so for LAMB a group must be held in part by every rank or by none (checked, collectively).
  ParamGroups(const std::string& kind, dist::Zero& zero, optim::OptimizerOptions opt, const NoDecayRule& no_decay = {});
  // Over AMP's f32 masters of this rank's ZeRO shard (`masters` are MasterWeights::
  // master_segments() over zero.segments()): clipping, state and zero_grad go through the Zero as
  // above, but step() does not gather (see the file comment).
  ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> masters, dist::Zero& zero,
              optim::OptimizerOptions opt, const NoDecayRule& no_decay = {});

  void set_lr(double lr);
  double lr() const { return decay_->lr(); }
  void zero_grad();
  // Both groups' updates; under f32 ZeRO then every rank's updated slices to every rank.
  void step();
  // The same, skipped on the device where the f32 [1] flag is nonzero (Optimizer::step(found_inf):
  // the Step's capturable update, step.h).
  void step(const Tensor& found_inf);
  // Both groups' gradients, decay group first (the order clip_grad_norm sums them in).
  std::vector<Tensor> grads() const;
  // Gradients for the segments, in the order they were given (AMP's master gradients).
  void set_grads(const std::vector<Tensor>& grads);
  // Clips all gradients by their global L2 norm (max_norm > 0); returns the norm before clipping.
  double clip_grad_norm(double max_norm) const;
  // The unsharded state. Under ZeRO collective: call it on every rank; only rank 0 gets the tensors.
  optim::NamedTensors state() const;
  void load_state(const optim::NamedTensors& state);
  const char* name() const { return decay_->name(); }
  // Segments in the no-weight-decay group on this rank (0 without a rule).
  size_t no_decay_segments() const { return no_decay_->num_segments(); }
  // Bytes of this rank's optimizer state buffers that exist now (momentum, moments: made by the
  // first step, or by load_state on resume); the per-parameter step counts are not buffers.
  int64_t state_bytes() const;

 private:
  std::unique_ptr<optim::Optimizer> decay_, no_decay_;
  std::vector<std::string> no_decay_names_;  // the no_decay group's parameter names
  std::vector<bool> seg_no_decay_;           // segment constructors: each segment's group, in order
  dist::Zero* zero_ = nullptr;
  bool gather_in_step_ = false;  // f32 ZeRO: step() ends with the all-gather (AMP: the loop does)
};

}  // namespace tandem::trainer
