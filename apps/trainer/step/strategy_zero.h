// apps/trainer/step/strategy_zero.h: ZeRO-1/2 (dist/zero.h) - each rank updates its shard of the
// parameters and keeps its optimizer state (1), and receives only its shard of the gradients (2);
// after the step every rank's shard goes to every rank. ZeRO-3 (strategy_zero3.cpp) builds on it.
#pragma once
#include <memory>

#include "apps/trainer/step/strategy.h"  // defines: StepStrategy

namespace tandem::trainer {

class ZeroStrategy : public StepStrategy {
 public:
  explicit ZeroStrategy(const StrategyParts& p);
  dist::Zero* zero() override { return zero_.get(); }
  std::unique_ptr<ParamGroups> make_groups(const StepOptions& o, const optim::OptimizerOptions& oo) override;
  void zero_grad(ParamGroups& groups) override;
  std::vector<std::pair<std::string, Tensor>> gradients() const override;
  optim::SumSquaresReduce sum_reduce() const override { return zero_->sum_reduce(); }
  dist::FullParameters full_parameters() override { return zero_->full_parameters(); }
  bool takes_part_in_state(int /*rank*/) const override { return true; }  // the shards gather onto rank 0

 protected:
  std::unique_ptr<dist::Zero> zero_;
};

}  // namespace tandem::trainer
