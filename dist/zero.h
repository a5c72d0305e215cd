// dist/zero.h: ZeRO stages 1, 2 and 3 - each rank keeps optimizer state for its 1/N of the parameters.
//
// Who owns what (shard_layout.h draws the layout): rank r owns slice r of every gradient bucket.
//   stage 1: gradients are all-reduced as by DDP (every rank has them all); each rank's optimizer
//            holds state for, and updates, only its slices; then the parameters are all-gathered.
//   stage 2: the reducer reduce-scatters each bucket during backward (ReducerOptions::collective =
//            ReduceScatter) and keeps only this rank's slice of the gradients; the rest as stage 1.
//   stage 3: the parameters too: rank r keeps its slice of every bucket's parameters, which the
//            optimizer updates in place; a module unit's whole parameters exist only while it
//            computes (zero3.h: units, gathers, prefetch). Nothing is gathered after the step.
// The optimizer is the ordinary one (optim/optimizer.h), built from this rank's segments:
//     dist::Zero zero(ddp, stage);               // ddp's reducer: AllReduce (1), ReduceScatter (2), any (3)
//     opts.norm_reduce = zero.sum_reduce();      // LAMB's per-parameter norms span the shards
//     auto opt = optim::make_optimizer("adamw", zero.segments(), zero.num_params(), opts);
//     loop: zero.zero_grad(*opt); backward; [clip_grad_norm(*opt, max, zero.sum_reduce())];
//           opt->step(); zero.gather_parameters();
// Collectives, in order and identical on every rank, on the DDP's communicator: the reducer's
// all-reduce (1) or reduce-scatter (2, 3) per bucket during backward; sum_reduce's all-reduce of a
// few doubles; stages 1, 2: one all-gather per bucket after the step, two in flight (a bucket's
// copy-out overlaps the next one's gather), landing in place where it can - a lone, unpadded
// parameter's bucket in the parameter, under stage 1 an unpadded bucket in its spent gradient
// buffer (nothing may read the gradients between gather_parameters() and zero_grad()); stage 3:
// the units' gathers, in forward and backward. Checkpoints (zero_state.cpp) are unsharded:
// gather_state() and gather_slices(); under stage 3 the weights are read inside full_parameters().
// Mixed precision (dist/README.md, "Mixed precision: who keeps the masters"): segments() are 16-bit
// views (stage 3: of the gathered 16-bit shards) that optim::MasterWeights is built over.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dist/ddp.h"
#include "dist/shard_layout.h"
#include "dist/zero3.h"
#include "optim/amp.h"
#include "optim/optimizer.h"

namespace tandem::dist {

class Zero {
 public:
  // stage 1, 2 or 3; `ddp` must outlive this. Stages 1 and 2 need the matching
  // ReducerOptions::collective; stage 3 sets up the reducer itself (regroup_by_unit) and shards the
  // parameters. Every collective goes through ddp.communicator().
  Zero(DistributedDataParallel& ddp, int stage, const Zero3Options& zero3 = {});

  int stage() const { return stage_; }
  const ShardLayout& layout() const { return layout_; }
  // This rank's ranges of the parameters (stage 3: of its shards), with their gradient views (stage 1:
  // into the bucket buffers; stage 2, 3: into the reduce-scattered shards), for optim::make_optimizer.
  std::vector<optim::ParamSegment> segments() const;
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  // Sums a vector of partial sums over the ranks (an all-reduce): clip_grad_norm and LAMB.
  optim::SumSquaresReduce sum_reduce() const;
  // This step's gradient views of segments() (same order): under AMP, optim::amp_step's `grads`.
  std::vector<Tensor> grads() const;
  // Zeroes what the next backward accumulates into: stage 1 the whole bucket gradients (the
  // optimizer only sees its slices), stage 2 the shards (through `opt`; under AMP `opt` holds the
  // f32 master gradients instead, and the 16-bit shards need none: the reduce-scatter overwrites them).
  void zero_grad(optim::Optimizer& opt);
  // After opt.step(): every rank's updated slices to every rank. Stage 1 may overwrite the
  // gradient buckets (spent; see above). Stage 3: nothing (each unit is gathered when it runs).
  void gather_parameters();
  // While the guard lives every parameter is whole (zero3.h). Collective. Stages 1, 2: a no-op.
  [[nodiscard]] FullParameters full_parameters() { return FullParameters(schedule_.get()); }
  const Zero3Schedule* schedule() const { return schedule_.get(); }  // stage 3; else null
  // The unsharded, name-keyed optimizer state, or any sharded slices (AMP's masters): collective,
  // only `root` gets the tensors (zero_state.cpp).
  optim::NamedTensors gather_state(const optim::Optimizer& opt, int root = 0) const;
  optim::NamedTensors gather_slices(const std::vector<optim::StateSlice>& slices, int root = 0) const;

 private:
  // This rank's slice of bucket b from `source(piece)` per piece (padding zero), in `dtype` or the bucket's.
  Tensor own_slice(size_t b, const std::function<Tensor(const ShardPiece&)>& source,
                   std::optional<DType> dtype = std::nullopt) const;

  DistributedDataParallel& ddp_;
  Communicator& comm_;
  int stage_;
  std::vector<NamedParam> params_;  // the reducer's list (trainable, in order)
  ShardLayout layout_;
  std::vector<ShardPiece> pieces_;  // this rank's, in bucket order
  std::unique_ptr<Zero3Schedule> schedule_;  // stage 3
};

}  // namespace tandem::dist
