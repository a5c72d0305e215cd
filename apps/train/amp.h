// apps/train/amp.h: --amp bf16|fp16 in the trainers - model cast, master weights, loss scale, step.
//
// make_amp casts the model as the AMP policy says (layers/amp_cast.h: 16-bit except BatchNorm)
// before DDP wraps it, so the gradient buckets of the 16-bit parameters are 16-bit on the wire.
// After DDP (and ZeRO) exist, build_masters makes the f32 masters (optim/amp.h): over every
// parameter (DDP), or over this rank's ZeRO shard only (--zero 1|2: Zero::segments(), views into
// the 16-bit parameters; masters and optimizer state then exist for the shard alone). The
// optimizer is built over master_segments() (make_amp_optimizer). Each step the loop multiplies the
// loss by scale() before backward and calls amp_step instead of the optimizer's step:
//   unscale + inf/NaN check (over the whole gradients, or the shard's gradient views) -> one
//   all-reduce of the flag over the CPU communicator, so every rank makes the same skip decision
//   also when gradients differ across ranks (ZeRO shards) -> LossScaler::update -> on a clean step
//   [--clip-grad-norm: global norm of the unscaled f32 master gradients, summed across shards under
//   ZeRO] optimizer.step() on the masters, copy back to 16-bit, and under ZeRO the all-gather.
// bf16 keeps the scale at 1 and still skips steps with non-finite gradients.
// Checkpoints hold the masters ("amp.master.<param>", unsharded f32, gathered from the shards under
// ZeRO) and the scaler ("amp.scaler.<entry>") next to the optimizer state; take_amp_state removes
// them again on resume and loads each rank's range, so an AMP checkpoint resumes at any world size
// and ZeRO stage.
// Reuse (train_encoder): everything below but the TrainOptions overload of make_amp is independent
// of train_imagenet's options; the order is make_amp(dtype) -> restore weights -> DDP [-> Zero] ->
// build_masters -> take_amp_state -> make_amp_optimizer; per step amp_step; at a checkpoint
// amp_state on every rank.
#pragma once
#include <memory>
#include <string>

#include "apps/train/options.h"
#include "dist/zero.h"
#include "layers/module.h"
#include "optim/amp.h"

namespace tandem::apps {

struct AmpRun {
  DType low = DType::BF16;
  std::unique_ptr<optim::MasterWeights> master;  // null until build_masters
  optim::LossScaler scaler;
  dist::Zero* zero = nullptr;  // --zero 1|2: the masters are this rank's shard (not owned)
};

// Casts `model` in place (call before DDP wraps it); fp16 gets dynamic loss scaling, bf16 none.
std::unique_ptr<AmpRun> make_amp(DType low, Module& model);
// Null for --amp off, else make_amp(dtype of --amp, model).
std::unique_ptr<AmpRun> make_amp(const TrainOptions& o, Module& model);
// The same from the --amp value ("off": null; "bf16", "fp16"): train_encoder's entry.
std::unique_ptr<AmpRun> make_amp(const std::string& amp, Module& model);
// The f32 masters, from the model's (broadcast) 16-bit weights: over all of `model`'s parameters,
// or over zero's shard when zero is not null (it must outlive `amp`).
void build_masters(AmpRun& amp, Module& model, dist::Zero* zero);
// `name` (sgd|adamw|lamb) over the masters; under ZeRO opts.norm_reduce should be zero.sum_reduce().
std::unique_ptr<optim::Optimizer> make_amp_optimizer(const AmpRun& amp, const std::string& name,
                                                     const optim::OptimizerOptions& opts);
// One AMP optimizer step (see the file comment); clip_grad_norm > 0 clips. Returns false when
// every rank skipped it. Collective: every rank calls it every step.
bool amp_step(AmpRun& amp, optim::Optimizer& opt, double clip_grad_norm = 0);
// Checkpoint entries (see the file comment). amp_state is collective under ZeRO (the masters are
// gathered, and only `root` gets them); use its result on `root`.
optim::NamedTensors amp_state(const AmpRun& amp, int root = 0);
// One rank's overflow flag made every rank's decision (an all-reduce over the CPU communicator).
bool any_rank_found_inf(bool found);
// Removes the AMP entries from a loaded optimizer state and loads them (each rank its own range).
void take_amp_state(AmpRun* amp, optim::NamedTensors& state);

}  // namespace tandem::apps
