// apps/trainer/step/strategy_zero.cpp: ZeRO-1/2 (strategy_zero.h).
#include "apps/trainer/step/strategy_zero.h"

namespace tandem::trainer {

ZeroStrategy::ZeroStrategy(const StrategyParts& p)
    : StepStrategy(p), zero_(std::make_unique<dist::Zero>(p.ddp, zero_stage(p.options.strategy))) {}

std::unique_ptr<ParamGroups> ZeroStrategy::make_groups(const StepOptions& o, const optim::OptimizerOptions& oo) {
  return std::make_unique<ParamGroups>(o.optimizer, *zero_, oo, o.no_decay);
}

void ZeroStrategy::zero_grad(ParamGroups& groups) {
  // What the next backward accumulates into: the shards, or at stage 1 the whole buckets (zero.h).
  groups.zero_grad();
}

std::vector<std::pair<std::string, Tensor>> ZeroStrategy::gradients() const {
  // This rank's shard, as the optimizer reads it.
  const std::vector<optim::ParamSegment> segs = zero_->segments();
  const std::vector<Tensor> grads = zero_->grads();
  std::vector<std::pair<std::string, Tensor>> g;
  for (size_t i = 0; i < segs.size(); ++i) g.emplace_back(segs[i].name, grads[i]);
  return g;
}

std::unique_ptr<StepStrategy> zero_strategy(const StrategyParts& p) { return std::make_unique<ZeroStrategy>(p); }

}  // namespace tandem::trainer
