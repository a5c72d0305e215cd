// apps/train/checkpointing.h: train_imagenet's side of layers/checkpoint.h - where to resume
// from, restoring a run, and writing one at an epoch's end.
//
// A checkpoint is written by rank 0 (every rank holds the same tensors after DDP's all-reduce), at
// the end of each epoch and after the run's last step, atomically (write, then rename), and older
// ones beyond --keep-checkpoints are pruned. The state records where the *next* step begins: an
// epoch that ran out is saved as (epoch + 1, index 0), so such a checkpoint resumes on any number
// of ranks; one written mid-epoch (--steps ending inside an epoch) records the position in the
// epoch and must resume on the same number of ranks, which restore_checkpoint checks.
#pragma once
#include <cstdint>
#include <string>

#include "apps/train/options.h"  // defines: TrainOptions
#include "dist/transport/bootstrap.h"  // defines: World
#include "layers/checkpoint.h"   // defines: TrainState, NamedTensors
#include "layers/module.h"       // defines: Module

namespace tandem::apps {

struct Training;

// --resume as a file: "auto" becomes the newest checkpoint in --checkpoint-dir ("" when none:
// a fresh start). Empty when not resuming.
std::string resume_path(const TrainOptions& o);

struct Restored {
  TrainState state;       // where the checkpointed run stood
  NamedTensors optimizer; // for SGD::load_state
};

// Loads `path` into `model` (already on its device), restores the default generator and checks
// that the checkpoint fits this run (same --model; the same world size when written mid-epoch).
Restored restore_checkpoint(const std::string& path, Module& model, const TrainOptions& o, const dist::World& w);

// Writes a checkpoint when one is due after `epoch`: with --checkpoint-dir, when the epoch ran out
// (`epoch_done`) or this is the run's last epoch. `step` steps are done, `index` samples of this
// epoch consumed per rank. Returns whether one was written (true on every rank; rank 0 writes).
bool checkpoint_if_due(const Training& t, const TrainOptions& o, int64_t epoch, int64_t step, int64_t index,
                       bool epoch_done, bool last_step);

}  // namespace tandem::apps
