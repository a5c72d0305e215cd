// dist/zero.h: ZeRO stages 1 and 2 - each rank keeps optimizer state for its 1/N of the parameters.
//
// Who owns what (shard_layout.h draws the layout): rank r owns slice r of every gradient bucket.
//   stage 1: gradients are all-reduced as by DDP (every rank has them all); each rank's optimizer
//            holds state for, and updates, only its slices; then the parameters are all-gathered.
//   stage 2: the reducer reduce-scatters each bucket during backward (ReducerOptions::collective =
//            ReduceScatter) and keeps only this rank's slice of the gradients; the rest as stage 1.
// The optimizer is the ordinary one (optim/optimizer.h), built from this rank's segments:
//     dist::Zero zero(ddp, stage);               // ddp's reducer: AllReduce (1) or ReduceScatter (2)
//     opts.norm_reduce = zero.sum_reduce();      // LAMB's per-parameter norms span the shards
//     auto opt = optim::make_optimizer("adamw", zero.segments(), zero.num_params(), opts);
//     loop: zero.zero_grad(*opt); backward; [clip_grad_norm(*opt, max, zero.sum_reduce())];
//           opt->step(); zero.gather_parameters();
// Collectives, in order and identical on every rank: the reducer's per-bucket all-reduce (1) or
// reduce-scatter (2) during backward; sum_reduce's one all-reduce of a few doubles (clipping, LAMB);
// after the step one all-gather per bucket, in bucket order, two in flight at a time (one bucket's
// copy-out overlaps the next one's gather).
// A gather lands in place where it can: a lone, unpadded parameter's bucket straight in the
// parameter, and under stage 1 an unpadded bucket in its spent gradient buffer (zero_grad clears it
// before the next backward: nothing may read the gradients between gather_parameters() and
// zero_grad()); otherwise in a buffer of the bucket's size. Why the gathers do not overlap the next
// forward: dist/README.md, "ZeRO".
// Communicator: the DDP's (ddp.communicator()), for the gathers and sum_reduce's few doubles alike,
// so ZeRO's collectives and the reducer's share one order.
// Checkpoints: gather_state() assembles the unsharded, name-keyed state an unsharded optimizer's
// state() returns, bucket by bucket (an all-gather per bucket and state buffer), so a checkpoint
// resumes at any world size and stage; load_state() of the sharded optimizer takes its ranges.
// Rank 0 keeps the whole assembled state while it writes (no streaming write: save_checkpoint takes
// the tensors at once); the other ranks keep only one bucket's worth at a time.
//
// Mixed precision (optim/amp.h; dist/README.md, "Mixed precision: who keeps the masters"): the
// parameters and buckets are 16-bit (BatchNorm's f32), so segments() are 16-bit views. The caller
// builds optim::MasterWeights over them - f32 masters and optimizer state for this rank's shard only:
//     loop: zero.zero_grad(*opt); backward of the scaled loss;
//           if (optim::amp_step(masters, scaler, *opt, zero.grads(), {any_rank_found_inf, clip,
//                               zero.sum_reduce()}))  // unscale + check, agree, [clip], step, copy_to_model
//             zero.gather_parameters();              // the 16-bit gather; a skipped step gathers nothing
// The found-inf flag must be all-reduced (apps/train/amp.h any_rank_found_inf): each rank checks only
// its shard. Checkpoints gather the masters with gather_slices(masters.state_slices()).
#pragma once
#include <optional>
#include <vector>

#include "dist/ddp.h"
#include "dist/shard_layout.h"
#include "optim/amp.h"
#include "optim/optimizer.h"

namespace tandem::dist {

class Zero {
 public:
  // stage 1 or 2; `ddp` must outlive this and use the matching ReducerOptions::collective. Every
  // collective goes through ddp.communicator().
  Zero(DistributedDataParallel& ddp, int stage);

  int stage() const { return stage_; }
  const ShardLayout& layout() const { return layout_; }
  // This rank's ranges of the parameters, with their gradient views (stage 1: into the bucket
  // buffers; stage 2: into the reduce-scattered shards), for optim::make_optimizer.
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
  // gradient buckets (spent; see above).
  void gather_parameters();
  // The unsharded optimizer state, keyed "<param>.<state>" with the parameters' shapes (as an
  // unsharded optimizer's state()). Collective; only `root` gets the tensors, the others get {}.
  optim::NamedTensors gather_state(const optim::Optimizer& opt, int root = 0) const;
  // The same for any sharded, name-keyed slices: keys "<param>.<state>", or "<param>" itself (AMP's
  // f32 masters, optim::MasterWeights::state_slices()). Gathered in f32 whatever the parameters'
  // dtype (optimizer state and masters are f32; a 16-bit trip would round them).
  optim::NamedTensors gather_slices(const std::vector<optim::StateSlice>& slices, int root = 0) const;

 private:
  // This rank's slice of bucket b, built from `source(piece)` per piece (padding zero), in `dtype`
  // (default: the bucket's parameters' dtype).
  template <typename F>
  Tensor own_slice(size_t b, F&& source, std::optional<DType> dtype = std::nullopt) const;

  DistributedDataParallel& ddp_;
  std::vector<NamedParam> params_;  // the reducer's list (trainable, in order)
  Communicator& comm_;
  int stage_;
  ShardLayout layout_;
  std::vector<ShardPiece> pieces_;  // this rank's, in bucket order
};

}  // namespace tandem::dist
