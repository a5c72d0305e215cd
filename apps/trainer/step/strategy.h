// apps/trainer/step/strategy.h: how the Step's ranks combine gradients and update - one interface, one
// implementation per strategy (strategy_ddp.cpp, strategy_zero.cpp, strategy_zero3.cpp,
// strategy_ps.cpp, strategy_tp.cpp). The Step picks one at construction (make_strategy, the only
// place that branches on the options) and calls it; AMP, the non-finite check and CUDA-graph capture
// stay the Step's. The calls and their order: apps/trainer/step/README.md ("Strategies").
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/trainer/step/amp.h"           // defines: AmpRun
#include "apps/trainer/step/param_groups.h"  // defines: ParamGroups
#include "apps/trainer/step/step_options.h"  // defines: StepOptions
#include "core/tensor.h"                // defines: Tensor
#include "dist/communicator.h"          // defines: Communicator
#include "dist/ddp.h"                   // defines: DistributedDataParallel
#include "dist/tp/shard.h"              // defines: TpLayout
#include "dist/zero.h"                  // defines: Zero, FullParameters
#include "layers/module.h"              // defines: Module

namespace tandem::trainer {

// The tensor-parallel side of a Step (StepOptions::tp > 1): the TP group and which canonical
// parameters the model splits.
struct TpParts {
  dist::Communicator* comm = nullptr;  // the grid's TP group; null without TP
  dist::tp::TpLayout layout;
};

// What a strategy's update works on: the optimizer and AMP, which the Step owns.
struct UpdateParts {
  ParamGroups& groups;
  AmpRun* amp = nullptr;          // null without AMP
  double clip = 0;                // StepOptions::clip_grad_norm (0: off)
  bool read_back = true;          // false inside a CUDA graph: nothing may wait for the device
  int64_t* skips_seen = nullptr;  // capturable AMP: the scaler's skipped count last read
};

// What every strategy works over: the Step's DDP, its model, StepComms::data and its options (the
// Step outlives its strategy).
struct StrategyParts {
  dist::DistributedDataParallel& ddp;
  Module& model;
  dist::Communicator& comm;
  const StepOptions& options;
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  // ZeRO's sharding, null for the others: AMP's masters and the optimizer are built over its shard.
  virtual dist::Zero* zero() { return nullptr; }
  // The optimizer without AMP: over the whole parameters, or this rank's shard.
  virtual std::unique_ptr<ParamGroups> make_groups(const StepOptions& o, const optim::OptimizerOptions& oo);
  // After the optimizer exists, before the checkpoint's state loads.
  virtual void attach() {}
  virtual void set_lr(double /*lr*/) {}
  // Clears what the next backward accumulates into.
  virtual void zero_grad(ParamGroups& groups);
  // The update after the non-finite check (the host form: [AMP's unscale and skip,] [clip,] step);
  // `grad_norm` receives the norm before clipping when clipping ran and the host can read it.
  // False: every rank skipped it.
  virtual bool update(UpdateParts& p, double& grad_norm);
  // Clips the gradients the optimizer reads by their global norm over everything this strategy
  // holds (every rank's shard, every TP rank's split); returns the norm before clipping.
  virtual double clip(UpdateParts& p, double max_norm);
  // The gradients the optimizer reads without AMP (this rank's shard under ZeRO), by parameter
  // name; undefined ones (frozen, unused) included.
  virtual std::vector<std::pair<std::string, Tensor>> gradients() const;
  // Sums per-rank sums of squares over the ranks that shard the gradients ({}: nothing to sum).
  virtual optim::SumSquaresReduce sum_reduce() const { return {}; }
  // The parameters whose bytes this rank holds (ZeRO-3: its shards, unless `whole`).
  virtual std::vector<Tensor> parameters(bool whole) const;
  virtual dist::FullParameters full_parameters() { return dist::FullParameters(nullptr); }
  // Whether this rank does work in Step::state(): rank 0 alone, every rank (collective), or the
  // refusal (the parameter server's state lives on the servers).
  virtual bool takes_part_in_state(int rank) const { return rank == 0; }
  // The checkpoint's optimizer entries (Step::state()'s, "amp.*" included) from what this rank's
  // optimizer holds, and back (Step::load_state): the canonical entries of the whole model, which
  // every strategy but TP's holds already (ZeRO's are gathered by the groups). TP: assembled over
  // the TP group - collective among the ranks that take part in state() - and sharded again.
  virtual optim::NamedTensors canonical_state(optim::NamedTensors mine) { return mine; }
  virtual optim::NamedTensors local_state(optim::NamedTensors canonical) const { return canonical; }
  StrategyParts parts() const { return {ddp_, model_, comm_, options_}; }

 protected:
  explicit StepStrategy(const StrategyParts& p) : ddp_(p.ddp), model_(p.model), comm_(p.comm), options_(p.options) {}
  dist::DistributedDataParallel& ddp_;
  Module& model_;
  dist::Communicator& comm_;
  const StepOptions& options_;  // the Step's (it outlives the strategy)
};

// The strategy p.options names. Under TP (o.tp > 1) the
// DP strategy wrapped by TP's clipping.
std::unique_ptr<StepStrategy> make_strategy(const StrategyParts& p, TpParts tp);

// Each implementation's maker (its own file).
std::unique_ptr<StepStrategy> ddp_strategy(const StrategyParts& p);
std::unique_ptr<StepStrategy> zero_strategy(const StrategyParts& p);
std::unique_ptr<StepStrategy> zero3_strategy(const StrategyParts& p);
std::unique_ptr<StepStrategy> ps_strategy(const StrategyParts& p);
std::unique_ptr<StepStrategy> tp_strategy(std::unique_ptr<StepStrategy> dp, TpParts tp);

}  // namespace tandem::trainer
