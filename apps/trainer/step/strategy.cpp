// apps/trainer/step/strategy.cpp: what the strategies share (the host update, clipping by the optimizer's
// own norm, the whole model's gradients and parameters) and make_strategy, the one branch on the
// options.
#include "apps/trainer/step/strategy.h"


namespace tandem::trainer {

std::unique_ptr<StepStrategy> make_strategy(const StrategyParts& p, TpParts tp) {
  std::unique_ptr<StepStrategy> s;
  switch (p.options.strategy) {
    case Strategy::Ddp: s = ddp_strategy(p); break;
    case Strategy::Zero1:
    case Strategy::Zero2: s = zero_strategy(p); break;
    case Strategy::Zero3: s = zero3_strategy(p); break;
    case Strategy::ParameterServer: s = ps_strategy(p); break;
  }
  // check() refused TP with zero3 and ps: TP wraps DDP or ZeRO-1/2.
  if (tp.comm) s = tp_strategy(std::move(s), std::move(tp));
  return s;
}

std::unique_ptr<ParamGroups> StepStrategy::make_groups(const StepOptions& o, const optim::OptimizerOptions& oo) {
  return std::make_unique<ParamGroups>(o.optimizer, model_.named_parameters(), oo, o.no_decay);
}

void StepStrategy::zero_grad(ParamGroups& /*groups*/) {
  // The gradients are DDP's bucket views: one memset per bucket, and the first accumulation copies
  // instead of adding (reducer.h). AMP's master gradients need nothing: the unscale overwrites them.
  ddp_.reducer().zero_grad();
}

bool StepStrategy::update(UpdateParts& p, double& grad_norm) {
  // AMP: unscale, agree on the skip, [clip the f32 master gradients], step, [ZeRO: all-gather].
  if (p.amp) return amp_step(*p.amp, p.groups, p.clip, &grad_norm, [&](double m) { return clip(p, m); });
  if (p.clip > 0) grad_norm = clip(p, p.clip);
  p.groups.step();  // under ZeRO followed by every rank's updated shard to every rank
  return true;
}

double StepStrategy::clip(UpdateParts& p, double max_norm) {
  // The optimizer's groups sum their squares (under ZeRO over every rank's shard: group_options
  // gave them the Zero's sum).
  return p.groups.clip_grad_norm(max_norm);
}

std::vector<std::pair<std::string, Tensor>> StepStrategy::gradients() const {
  std::vector<std::pair<std::string, Tensor>> g;
  for (const auto& [name, p] : model_.named_parameters())
    if (p.requires_grad()) g.emplace_back(name, p.grad());
  return g;
}

std::vector<Tensor> StepStrategy::parameters(bool /*whole*/) const {
  std::vector<Tensor> w;
  for (const auto& [name, p] : model_.named_parameters()) w.push_back(p);
  return w;
}

}  // namespace tandem::trainer
