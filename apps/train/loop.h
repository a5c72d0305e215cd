// apps/train/loop.h: train_imagenet's step loop over one epoch.
//
// Each step: the LR of optim/lr_schedule.h at the run's position in samples (apps/trainer/
// position.h: RunLength::schedule_position), then the training step (apps/trainer/
// step.h) with this trainer's loss - forward through DDP (which broadcasts BN buffers) and
// cross-entropy; the Step does the rest (backward with the gradients all-reduced in buckets while
// it runs, the non-finite agreement, the update). An epoch starts where the position says
// (start_epoch(epoch, epoch_offset): a mid-epoch resume on any world size and batch reads the
// samples of the epoch's order not yet consumed) and runs until the loader runs out, the run ends
// or this invocation's last step (--run-steps). The loss is summed on the device and read only
// when a progress line is due (every --log-every steps and after the last), so no step waits for
// the host; the line's loss and top-1 are reduced across ranks in one collective, together with the
// count of out-of-range labels the CUDA loss clamped (a non-zero count is printed as a warning
// naming the steps). TANDEM_FAULT's hooks run at their places in the step (apps/train/faults.h):
// before it, and between forward and backward inside the loss. The loop hands the Step the batch
// (Step::run's batch form): the Step splits it into --grad-accum-steps micro-batches and, under
// --cuda-graph, copies it into the static tensors the captured step reads, so no branch is here.
// After each step the run control (apps/trainer/run/preemption.h) is asked, on every rank alike, whether
// to save now (--checkpoint-every, --checkpoint-interval, before a stop) and whether to stop (a
// preemption signal): a save inside the epoch is written here, at the current position; one that
// falls on the epoch's last step is left to the epoch-end checkpoint; a stop ends the epoch early.
#pragma once
#include <cstddef>
#include <cstdint>

#include <optional>

#include "apps/train/faults.h"              // defines: Fault
#include "apps/train/options.h"             // defines: TrainOptions
#include "apps/train/report.h"              // defines: RunRecord, Interval, progress_line
#include "apps/train/setup.h"               // defines: Training
#include "apps/trainer/run/clock.h"             // defines: RunClock
#include "apps/trainer/run/preemption.h"        // defines: RunControl
#include "apps/trainer/run/position.h"          // defines: Position
#include "apps/trainer/run/timeline_window.h"   // defines: TimelineWindow
#include "core/tensor.h"                    // defines: Tensor
#include "data/loader.h"                    // defines: Batch

namespace tandem::apps {

// The step loop's state, carried from epoch to epoch.
struct LoopState {
  // Where the next step begins: steps and samples since the start of training (across resumes),
  // the epoch and the samples of its order consumed. Kept at a step boundary after every step: an
  // epoch that ran out reads (epoch + 1, 0), so a checkpoint can be written from it at any step
  // boundary (save_checkpoint_now).
  trainer::Position pos;
  int64_t interval_steps = 0;  // steps since the last progress line
  int64_t interval_losses = 0; // of those, the steps whose loss is in loss_sum (not skipped)
  Tensor loss_sum;             // device-side sum of those steps' losses (undefined: none yet)
  std::optional<Fault> fault;  // TANDEM_FAULT (none: the normal case)
  trainer::RunControl* control = nullptr;  // asked after every step (null: never saves or stops early)
  trainer::TimelineWindow comm;  // the interval's communication figures
  data::Batch batch;           // reused from step to step
};

struct EpochEnd {
  int64_t epoch = 0;  // the epoch these steps belonged to
  bool done = false;  // the epoch ran out (else the run's or this invocation's last step came first, or a stop)
  bool stopped = false;  // the run control decided to stop (preemption); a save inside the epoch was written
};

// Whether this invocation has more steps to take from s.pos: the run is not done (RunLength) and
// neither --run-epochs nor --run-steps stopped it.
bool steps_left(const Training& t, const LoopState& s);

// Trains s.pos.epoch from where s.pos stands (mid-epoch on resume) until the loader runs out or
// steps_left() ends; fills rec.last at each progress line and adds to rec's compute time and
// skipped steps. Throws trainer::RunStopped on every rank when a loss, gradient or weight is not
// finite under --on-nonfinite stop (weights: skip too). Returns early, with `stopped`, when
// s.control decides to stop (a save it asked for inside the epoch is written here).
EpochEnd train_epoch(Training& t, const TrainOptions& o, LoopState& s, trainer::RunClock& clock, RunRecord& rec);

}  // namespace tandem::apps
