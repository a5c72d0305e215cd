// apps/trainer/step/amp.h: mixed precision in the Step - model cast, f32 master weights, loss scale, update.
// AmpRun is what the Step holds under a 16-bit precision; the ranks agree on fp16's found-inf flag
// over the Step's control communicator, so every rank skips an overflowing step alike.
// In full: apps/trainer/step/README.md ("amp.h in detail").
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "apps/trainer/step/param_groups.h"  // defines: ParamGroups, NoDecayRule
#include "dist/communicator.h"          // defines: Communicator
#include "dist/zero.h"                  // defines: Zero
#include "layers/module.h"              // defines: Module
#include "optim/amp.h"                  // defines: MasterWeights, LossScaler

namespace tandem::trainer {

struct AmpRun {
  DType low = DType::BF16;
  std::unique_ptr<optim::MasterWeights> master;  // null until build_masters
  optim::LossScaler scaler;
  dist::Zero* zero = nullptr;  // ZeRO-1/2: the masters are this rank's shard (not owned)
  dist::Communicator* control = nullptr;  // CPU, every rank of the job: the found-inf agreement (not owned)
};

// Casts `model` in place to `low` (bf16 or f16; call before DDP wraps it); f16 gets dynamic loss
// scaling, bf16 none. `control`: the CPU communicator over every rank of the job, which agrees on
// the overflow flag (it must outlive the AmpRun).
std::unique_ptr<AmpRun> make_amp(DType low, Module& model, dist::Communicator& control);
// The f32 masters, from the model's (broadcast) 16-bit weights: over all of `model`'s parameters,
// or over zero's shard when zero is not null (it must outlive `amp`).
void build_masters(AmpRun& amp, Module& model, dist::Zero* zero);
// The optimizer `kind` (sgd|adamw|lamb) over the masters, in the groups `no_decay` says; under
// ZeRO through the Zero (clipping, state and zero_grad span the shards; LAMB's norms too).
std::unique_ptr<ParamGroups> make_amp_groups(const AmpRun& amp, const std::string& kind,
                                             const optim::OptimizerOptions& opts, const NoDecayRule& no_decay = {});
// One AMP optimizer step (see the file comment); clip_grad_norm > 0 clips, and `grad_norm` (when
// given) receives the norm before clipping. Returns false when every rank skipped it (the overflow
// flag is agreed over the whole world, so the ranks of a TP group skip alike too).
// Collective: every rank calls it every step. `clip` (when given) clips the master gradients
// instead of opt.clip_grad_norm and returns the norm: the Step's tensor-parallel norm.
using ClipFn = std::function<double(double max_norm)>;
bool amp_step(AmpRun& amp, ParamGroups& opt, double clip_grad_norm = 0, double* grad_norm = nullptr,
              const ClipFn& clip = {});
// Checkpoint entries (see the file comment). amp_state is collective under ZeRO (the masters are
// gathered, and only `root` gets them); use its result on `root`.
optim::NamedTensors amp_state(const AmpRun& amp, int root = 0);
// One rank's overflow flag made every rank's decision (an all-reduce over `control`, a CPU communicator).
bool any_rank_found_inf(dist::Communicator& control, bool found);
// Removes the AMP entries from a loaded optimizer state and loads them (each rank its own range).
void take_amp_state(AmpRun* amp, optim::NamedTensors& state);

}  // namespace tandem::trainer
