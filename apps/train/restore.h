// apps/train/restore.h: restoring train_imagenet's checkpoints (checkpoint/checkpoint.h) - what set-up
// (setup.h) calls before DDP broadcasts the weights; writing them is checkpointing.h's. The folder's
// settings come from the flags here too. A file of another --model, --optimizer or class list is
// refused on every rank alike, naming the difference and what to do.
#pragma once
#include <string>
#include <vector>

#include "apps/train/options.h"        // defines: TrainOptions
#include "dist/transport/bootstrap.h"  // defines: World
#include "checkpoint/checkpoint.h"         // defines: TrainState, NamedTensors
#include "checkpoint/checkpoint_dir.h"     // defines: CheckpointDirOptions
#include "layers/module.h"             // defines: Module

namespace tandem::apps {

// The checkpoint folder's settings from the flags (--checkpoint-dir, --resume, --run-id,
// --overwrite-checkpoints, --keep-checkpoints); dir empty: no folder.
CheckpointDirOptions folder_options(const TrainOptions& o);

struct Restored {
  TrainState state;       // where the checkpointed run stood
  NamedTensors optimizer; // for the Step's load_state
};

// Loads `path` into `model` (already on its device) after checking, from the file's header, that
// it fits this run: the same --model, and `classes` (train/'s list, empty for --synthetic) equal to
// the checkpoint's list when it has one. A mismatch throws trainer::UsageError on every rank (it is
// the same on every rank), naming the difference and what to do.
Restored restore_checkpoint(const std::string& path, Module& model, const TrainOptions& o, const dist::World& w,
                            const std::vector<std::string>& classes);

}  // namespace tandem::apps
