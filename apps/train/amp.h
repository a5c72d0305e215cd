// apps/train/amp.h: --amp bf16|fp16 in train_imagenet - model cast, master weights, loss scale, step.
// train_encoder uses the same pieces (make_amp by name, any_rank_found_inf, the checkpoint entries)
// with its own step, which clips the unscaled master gradients (apps/encoder/loop.h).
//
// make_amp casts the model as the AMP policy says (layers/amp_cast.h: 16-bit except BatchNorm)
// before DDP wraps it, so the gradient buckets of the 16-bit parameters are 16-bit on the wire;
// the optimizer is then built over the f32 masters (optim/amp.h). Each step the loop multiplies the
// loss by scale() before backward and calls amp_step instead of the optimizer's step:
//   unscale + inf/NaN check -> one all-reduce (sum) of the flag over the CPU communicator, so every
//   rank makes the same skip decision also when gradients differ across ranks (ZeRO shards) ->
//   LossScaler::update -> on a clean step optimizer.step() on the masters and copy back to 16-bit.
// bf16 keeps the scale at 1 and still skips steps with non-finite gradients.
// Checkpoints hold the masters ("amp.master.<param>") and the scaler ("amp.scaler.<entry>") next to
// the optimizer state; take_amp_state removes them again on resume before the optimizer loads.
#pragma once
#include <memory>

#include "apps/train/options.h"
#include "layers/module.h"
#include "optim/amp.h"

namespace tandem::apps {

struct AmpRun {
  DType low = DType::BF16;
  std::unique_ptr<optim::MasterWeights> master;
  optim::LossScaler scaler;
};

// Null for --amp off. Otherwise casts `model` in place (call before DDP wraps it) and builds the
// masters from its parameters.
std::unique_ptr<AmpRun> make_amp(const TrainOptions& o, Module& model);
// The same from the --amp value ("off", "bf16", "fp16"): train_encoder's entry.
std::unique_ptr<AmpRun> make_amp(const std::string& amp, Module& model);
// One rank's overflow flag made every rank's decision (an all-reduce over the CPU communicator).
bool any_rank_found_inf(bool found);
// One AMP optimizer step over the model's gradients (see the file comment). Returns false when
// every rank skipped it.
bool amp_step(AmpRun& amp, optim::Optimizer& opt);
// Checkpoint entries (see the file comment).
void add_amp_state(const AmpRun& amp, optim::NamedTensors& state);
void take_amp_state(AmpRun* amp, optim::NamedTensors& state);

}  // namespace tandem::apps
