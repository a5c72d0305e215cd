// apps/trainer/position.h: where a run stands between two steps - the one record of the loop's
// position that a checkpoint keeps and a resume starts from, for both trainers.
//
// A Position is (step, epoch, index_in_epoch): optimizer steps done since the start of training
// (across resumes; the Step's steps_done), the epoch the next step belongs to, and the samples this
// rank has consumed of that epoch (0 at an epoch's end). An index inside an epoch means something
// only at the world size that wrote it (each rank's shard of an epoch depends on the world size),
// so the checkpoint records the world size and a trainer refuses to resume inside an epoch on
// another one. The default generator (dropout's and augmentation's draws) is saved and restored
// with the position, so a resumed run draws what the uninterrupted one would.
// Each trainer adds its own settings to TrainState::extra (schedule, batch, model sizes) and names
// its files; the optimizer's side of a checkpoint is Step::state() (step.h).
#pragma once
#include <cstdint>
#include <string>

#include "layers/checkpoint.h"  // defines: TrainState

namespace tandem::trainer {

struct Position {
  int64_t step = 0;            // optimizer steps done since the start of training
  int64_t epoch = 0;           // the epoch the next step belongs to (and the sampler's shuffle seed)
  int64_t index_in_epoch = 0;  // samples this rank has consumed in `epoch` (0 at an epoch's end)
};

// A checkpoint's TrainState at `p`, written by `world_size` ranks training `model`, with the default
// generator's state.
TrainState train_state(const Position& p, int world_size, const std::string& model);
// Where a checkpoint's run stood (its position), after restoring the default generator it saved
// (when it saved one). A trainer calls it once, when it resumes.
Position resume_position(const TrainState& s);

}  // namespace tandem::trainer
