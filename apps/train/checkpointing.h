// apps/train/checkpointing.h: train_imagenet's side of checkpoint/checkpoint.h - writing a checkpoint at
// the position where the loop stands (restoring one: restore.h, which set-up calls).
//
// The folder (--checkpoint-dir) is owned by one run: apps/trainer/run/run_folder.h opens it at
// start-up on rank 0 (lock, write probe, dead temporaries, the fresh-start refusal, --resume
// auto's choice) and every checkpoint goes through it, so pruning (--keep-checkpoints) only ever
// removes this run's older files. A checkpoint is written by rank 0 (every rank holds the same
// tensors after DDP's all-reduce), at the end of each epoch and where the invocation stops
// (after the run's last step, --run-epochs, --run-steps), atomically (write, then rename), and
// only from finite state: the weights, buffers and optimizer state are checked first, under every
// --on-nonfinite policy (apps/trainer/step/nonfinite.h), and a non-finite value stops every rank
// instead (exit 3). The state records where the *next* step begins (apps/trainer/run/position.h): an
// epoch that ran out is saved as (epoch + 1, offset 0) under checkpoint_epoch<E+1>; one written
// inside an epoch records the global samples of the epoch's order consumed, under
// checkpoint_epoch<E>_step<S>, so the two never share a name. Both resume on any number of ranks
// and any --batch: the loader continues the epoch's order from that offset, and the LR schedule
// continues in samples. The checkpoint also carries train/'s class list; a resume checks it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/train/options.h"        // defines: TrainOptions
#include "apps/trainer/run/position.h"     // defines: Position
#include "checkpoint/checkpoint.h"     // defines: TrainState, NamedTensors

namespace tandem::apps {

struct Training;

// Writes a checkpoint of the run at `at` (the loop's position, LoopState::pos, which the loop keeps
// at a step boundary: an epoch that ran out already reads (epoch + 1, 0)). Collective: every rank
// calls it (ZeRO gathers the optimizer state, and the finite-state check agrees across ranks); rank
// 0 writes. Returns whether a checkpoint was written (false without --checkpoint-dir; the same on
// every rank). Throws trainer::RunStopped on every rank, writing nothing, when the state holds a
// non-finite value.
bool save_checkpoint_now(Training& t, const TrainOptions& o, const trainer::Position& at);

}  // namespace tandem::apps
