// apps/trainer/step/strategy_ps.cpp: the parameter server (dist/extras/parameter_server.h) - the workers
// push their gradients to servers on ranks 0..K-1, the servers run the optimizer on their
// partitions (in the Step's two parameter groups: decay and no_decay), and the workers pull the
// weights back. The reducer stops averaging (permanently
// "no_sync": backward only accumulates into .grad); the workers' optimizer is built but never
// steps. Its state lives on the servers and is not gathered: no checkpoint.
#include <memory>

#include "apps/trainer/step/strategy.h"          // defines: StepStrategy
#include "core/check.h"                     // defines: TANDEM_CHECK
#include "dist/extras/parameter_server.h"   // defines: ParameterServer

namespace tandem::trainer {

namespace {

class PsStrategy : public StepStrategy {
 public:
  explicit PsStrategy(const StrategyParts& p) : StepStrategy(p) {}

  void attach() override {
    ddp_.reducer().set_sync(false);
    dist::PsOptions po;
    po.servers = options_.ps_servers;
    po.optimizer = options_.optimizer;
    po.optimizer_options = options_.optimizer_options;
    po.no_decay = options_.no_decay;  // the same two groups as ParamGroups, on the servers
    optim::NamedTensors trainable;
    for (auto& [name, p] : model_.named_parameters())
      if (p.requires_grad()) trainable.emplace_back(name, p);
    ps_ = std::make_unique<dist::ParameterServer>(std::move(trainable), comm_, po);
  }

  void set_lr(double lr) override { ps_->set_lr(lr); }

  bool update(UpdateParts& /*p*/, double& /*grad_norm*/) override {
    ps_->step(&ddp_.timeline());  // push, update on the servers, pull
    return true;
  }

  bool takes_part_in_state(int /*rank*/) const override {
    const OptionNames& n = options_.names;
    TANDEM_CHECK(false, "Step::state: under the parameter server the optimizer state lives on the servers and is "
                 "not gathered (", option_name(n, "strategy", "ps"), " refuses ", option_name(n, "checkpoint"), ")");
    return false;
  }

 private:
  std::unique_ptr<dist::ParameterServer> ps_;
};

}  // namespace

std::unique_ptr<StepStrategy> ps_strategy(const StrategyParts& p) { return std::make_unique<PsStrategy>(p); }

}  // namespace tandem::trainer
