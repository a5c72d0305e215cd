// apps/trainer/step/strategy_ddp.cpp: DDP - every rank all-reduces the gradients (dist/ddp.h) and updates
// every parameter. The one strategy with a capturable update (the only one a CUDA graph holds):
// the found-inf flag, the clipping norm and the skip stay on the device (README: "The capturable
// update").
#include <memory>

#include "apps/trainer/step/strategy.h"  // defines: StepStrategy
#include "optim/clip.h"             // defines: GradClipper

namespace tandem::trainer {

namespace {

class DdpStrategy : public StepStrategy {
 public:
  explicit DdpStrategy(const StrategyParts& p)
      : StepStrategy(p), capturable_(p.options.capturable || p.options.cuda_graph) {
    if (capturable_ && p.options.clip_grad_norm > 0)
      clipper_ = std::make_unique<optim::GradClipper>(p.options.clip_grad_norm);
  }

  bool update(UpdateParts& p, double& grad_norm) override {
    return capturable_ ? update_capturable(p, grad_norm) : StepStrategy::update(p, grad_norm);
  }

 private:
  bool update_capturable(UpdateParts& p, double& grad_norm) {
    if (!p.amp) {
      if (clipper_) clipper_->clip(p.groups.grads());
      p.groups.step();
      if (p.read_back && clipper_) grad_norm = clipper_->norm().item();
      return true;
    }
    optim::LossScaler& scaler = p.amp->scaler;
    Tensor flag = scaler.found_inf();
    p.amp->master->unscale_and_flag(p.amp->master->model_grads(), scaler.scale_tensor(), flag);
    // Every rank's flag made every rank's decision, as the host form's any_rank_found_inf: under DDP
    // the averaged gradients agree anyway, but a rank may still differ (a fault), and the skip must
    // not. Sum: any nonzero value skips. NCCL: on the communication stream, joined back by wait().
    comm_.all_reduce(flag, dist::ReduceOp::Sum, "amp found_inf")->wait();
    p.groups.set_grads(p.amp->master->master_grads());
    if (clipper_) clipper_->clip(p.groups.grads());  // a non-finite norm leaves the gradients alone
    p.groups.step(flag);  // writes the 16-bit parameters too, skipped alike (optim/amp.h)
    scaler.update_on_device();
    if (!p.read_back) return true;
    const int64_t skipped = scaler.skipped_steps();
    const bool applied = skipped == *p.skips_seen;
    *p.skips_seen = skipped;
    if (applied && clipper_) grad_norm = clipper_->norm().item();  // the host form clips applied steps only
    return applied;
  }

  const bool capturable_;                        // StepOptions::capturable || cuda_graph
  std::unique_ptr<optim::GradClipper> clipper_;  // capturable with clipping
};

}  // namespace

std::unique_ptr<StepStrategy> ddp_strategy(const StrategyParts& p) { return std::make_unique<DdpStrategy>(p); }

}  // namespace tandem::trainer
