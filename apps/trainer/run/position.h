// apps/trainer/run/position.h: where a run stands between two steps, and how far it has to go - the one
// record of the loop's position that a checkpoint keeps and a resume starts from, for both trainers.
// In full: apps/trainer/run/README.md ("position.h in detail").
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"  // defines: TrainState

namespace tandem::trainer {

struct Position {
  int64_t step = 0;          // optimizer steps done since the start of training
  int64_t epoch = 0;         // the epoch the next step belongs to (and the sampler's shuffle seed)
  int64_t epoch_offset = 0;  // global samples of `epoch`'s order consumed (0 at an epoch's start)
  int64_t samples = 0;       // global samples consumed since the start of training
};

// The epoch as users read it - progress lines, validation lines, JSON logs, file names - counted
// from 1 (`epoch` above is the sampler's 0-based index): the epoch of the step just taken, so after
// an epoch ran out, recorded as (epoch + 1, 0), it is still the finished one. checkpoint_epoch3 is
// the end of "epoch 3", checkpoint_epoch3_step70 a step inside it (checkpoint/checkpoint_dir.h).
inline int64_t epoch_number(const Position& p) {
  return p.epoch_offset == 0 && p.epoch > 0 ? p.epoch : p.epoch + 1;
}

// A checkpoint's TrainState at `p`, written by `world_size` ranks taking `global_batch` samples a
// step, training `model`, with the default generator's state. index_in_epoch (the per-rank form of
// the format-1 files) is left 0: epoch_offset is what a resume reads.
TrainState train_state(const Position& p, int world_size, int64_t global_batch, const std::string& model);
// Where a checkpoint's run stood, after restoring the default generator it saved (when it saved
// one). A trainer calls it once, when it resumes. A file that does not know its samples (format 1
// without its batch size, or a format-2 file written before the apps counted them) counts step x
// its global batch, or x `global_batch` (today's) when it does not say.
Position resume_position(const TrainState& s, int64_t global_batch);

// The run's length and its LR schedule's position (see the file comment). Exactly one of epochs
// and total_samples is > 0.
struct RunLength {
  int64_t epochs = 0;           // --epochs runs: the run ends at epoch == epochs
  int64_t total_samples = 0;    // --steps runs: the run ends once samples >= total_samples
  int64_t global_batch = 0;     // G now: batch per rank x ranks
  int64_t steps_per_epoch = 0;  // full global batches per epoch at G
  int64_t unit_batch = 0;       // --steps runs: the schedule's unit, the fresh start's G

  bool by_epochs() const { return epochs > 0; }
  // Steps of the schedule's unit per epoch: spe (--epochs), spe x G / unit_batch rounded (--steps).
  double unit_steps_per_epoch() const;
  // A count of the fresh start's steps (--warmup-steps) in the schedule's unit, rounded.
  int64_t unit_steps(int64_t fresh_steps, int64_t fresh_global_batch) const;
  // The schedule's length in its unit: epochs x spe, or total_samples / unit_batch.
  int64_t schedule_total() const;
  // The LR schedule's position of the next step at `p`, in its unit (lr_at_position's argument).
  double schedule_position(const Position& p) const;
  bool done(const Position& p) const;
  // Steps left from `p` at G. `left_in_epoch`: batches the loader still hands out in p.epoch
  // (its batches_per_epoch(p.epoch_offset)).
  int64_t steps_left(const Position& p, int64_t left_in_epoch) const;
};

}  // namespace tandem::trainer
