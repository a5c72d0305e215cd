// apps/trainer/step/strategy_zero3.cpp: ZeRO-3 - ZeRO-2 with the parameters sharded too: each unit's
// parameters exist only while it runs (dist/zero3.h), so the weights this rank holds are its shards,
// and a reader outside the step takes full_parameters() first.
#include "apps/trainer/step/strategy_zero.h"  // defines: ZeroStrategy
#include "dist/zero3.h"                  // defines: Zero3Schedule

namespace tandem::trainer {

namespace {

class Zero3Strategy : public ZeroStrategy {
 public:
  using ZeroStrategy::ZeroStrategy;
  std::vector<Tensor> parameters(bool whole) const override {
    if (whole) return StepStrategy::parameters(true);  // while full_parameters() is held
    const dist::Zero3Schedule* z3 = zero_->schedule();
    std::vector<Tensor> w;
    for (size_t b = 0; b < zero_->layout().buckets().size(); ++b) w.push_back(z3->shard(b));
    return w;
  }
};

}  // namespace

std::unique_ptr<StepStrategy> zero3_strategy(const StrategyParts& p) { return std::make_unique<Zero3Strategy>(p); }

}  // namespace tandem::trainer
