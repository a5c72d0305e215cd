// apps/trainer/step/strategy_tp.cpp: tensor parallelism, alone (over DDP) or with ZeRO-1/2 over the DP
// ranks - the DP strategy, with the global gradient norm taken over the canonical model: the split
// parameters' squares summed over the TP group, the replicated ones (identical on every TP rank)
// taken once (dist/tp/clip.h's rule). The TP layers' own all-reduces run inside the model. The
// optimizer state leaves and enters the Step canonical: assembled over the TP group by state(),
// sharded by load_state() (dist/tp/shard.h), so checkpoints ignore the TP size.
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "apps/trainer/step/strategy.h"  // defines: StepStrategy
#include "dist/tp/shard.h"               // defines: gather_state_dict, shard_state_dict
#include "optim/clip.h"             // defines: grad_norm, clip_grad_norm

namespace tandem::trainer {

namespace {

const std::string kMaster = "amp.master.";  // amp.h's prefix of the f32 masters

// AMP's f32 masters are flat ("amp.master.<param>" of [numel], as optim::assemble_state writes them,
// with or without TP), and dist/tp/shard.h splits a tensor along its parameter's dimension only when
// it has the parameter's shape. So they take the parameter's shape (`shapes`: name -> shape) around
// the split and are flat again after it.
optim::NamedTensors masters_shaped(optim::NamedTensors s, const std::map<std::string, Shape>& shapes) {
  for (auto& [key, t] : s)
    if (key.rfind(kMaster, 0) == 0)
      if (auto it = shapes.find(key.substr(kMaster.size())); it != shapes.end() && t.numel() == shape_numel(it->second))
        t = t.view(it->second);
  return s;
}

optim::NamedTensors masters_flat(optim::NamedTensors s) {
  for (auto& [key, t] : s)
    if (key.rfind(kMaster, 0) == 0) t = t.view({t.numel()});
  return s;
}

class TpStrategy : public StepStrategy {
 public:
  TpStrategy(std::unique_ptr<StepStrategy> dp, TpParts tp) : StepStrategy(dp->parts()), dp_(std::move(dp)), tp_(std::move(tp)) {}

  dist::Zero* zero() override { return dp_->zero(); }
  std::unique_ptr<ParamGroups> make_groups(const StepOptions& o, const optim::OptimizerOptions& oo) override {
    return dp_->make_groups(o, oo);
  }
  void attach() override { dp_->attach(); }
  void set_lr(double lr) override { dp_->set_lr(lr); }
  void zero_grad(ParamGroups& groups) override { dp_->zero_grad(groups); }
  // The DP strategy's update (check() refused the capturable form under TP), clipped by clip() below.
  bool update(UpdateParts& p, double& grad_norm) override { return StepStrategy::update(p, grad_norm); }
  std::vector<std::pair<std::string, Tensor>> gradients() const override { return dp_->gradients(); }
  optim::SumSquaresReduce sum_reduce() const override { return dp_->sum_reduce(); }
  std::vector<Tensor> parameters(bool whole) const override { return dp_->parameters(whole); }
  dist::FullParameters full_parameters() override { return dp_->full_parameters(); }
  bool takes_part_in_state(int rank) const override { return dp_->takes_part_in_state(rank); }

  // The first TP group (DP rank 0, which holds the DP strategy's state: ZeRO gathers it there)
  // assembles the canonical entries, every rank of it getting them; the other groups hold none.
  optim::NamedTensors canonical_state(optim::NamedTensors mine) override {
    if (comm_.rank() != 0) return mine;
    return masters_flat(dist::tp::gather_state_dict(masters_shaped(std::move(mine), shapes(false)), tp_.layout,
                                                    *tp_.comm));
  }
  optim::NamedTensors local_state(optim::NamedTensors canonical) const override {
    return masters_flat(dist::tp::shard_state_dict(masters_shaped(std::move(canonical), shapes(true)), tp_.layout,
                                                   tp_.comm->rank(), tp_.comm->size()));
  }

  double clip(UpdateParts& p, double max_norm) override {
    // What this rank's optimizer reads: AMP's f32 master gradients (of this rank's ZeRO shard, or
    // whole), else the DP strategy's gradients; under ZeRO both are first summed over the DP shards.
    std::vector<Tensor> split, replicated;
    auto sort = [&](const std::string& name, const Tensor& g) {
      if (g.defined()) (tp_.layout.count(name) ? split : replicated).push_back(g);
    };
    if (p.amp) {
      const std::vector<optim::ParamSegment> segs = p.amp->master->master_segments();
      const std::vector<Tensor> grads = p.amp->master->master_grads();
      for (size_t i = 0; i < segs.size(); ++i) sort(segs[i].name, grads[i]);
    } else {
      for (const auto& [name, g] : dp_->gradients()) sort(name, g);
    }
    const optim::SumSquaresReduce dp = dp_->sum_reduce();
    dist::Communicator& tp = *tp_.comm;
    const double s = optim::grad_norm(split, [&](std::vector<double>& sums) {
      if (dp) dp(sums);
      Tensor t = Tensor::from_vector_f64(sums, {static_cast<int64_t>(sums.size())}, DType::F64, tp.device());
      tp.all_reduce(t, dist::ReduceOp::Sum, "tp grad_norm")->wait();
      sums = t.to_vector_f64();
    });
    const double rep = optim::grad_norm(replicated, dp);
    const double total = std::sqrt(s * s + rep * rep);
    optim::clip_grad_norm(p.groups.grads(), max_norm, [total](std::vector<double>& sums) { sums.assign(1, total * total); });
    return total;
  }

 private:
  // This rank's parameter shapes (its shards), or the canonical ones (the split dimension whole).
  std::map<std::string, Shape> shapes(bool canonical) const {
    std::map<std::string, Shape> out;
    for (const auto& [name, p] : model_.named_parameters()) {
      Shape shape = p.shape();
      if (auto it = tp_.layout.find(name); canonical && it != tp_.layout.end()) shape[it->second.dim] = it->second.full;
      out[name] = shape;
    }
    return out;
  }

  std::unique_ptr<StepStrategy> dp_;
  TpParts tp_;
};

}  // namespace

std::unique_ptr<StepStrategy> tp_strategy(std::unique_ptr<StepStrategy> dp, TpParts tp) {
  return std::make_unique<TpStrategy>(std::move(dp), std::move(tp));
}

}  // namespace tandem::trainer
