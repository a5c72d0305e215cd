// apps/encoder/loop.h: train_encoder's step loop.
//
// Each step: the next batch of masked sequences (the loader moves on to the next epoch, reshuffled
// and re-masked, when one runs out), the LR of BERT's schedule at the run's position in samples
// (apps/trainer/run/position.h: RunLength::schedule_position), then the training
// step (apps/trainer/step/step.h) with this trainer's loss: forward through DDP (forward_with: the model
// takes ids, attention mask, token types and labels) computing the masked-LM loss. The Step does
// the rest: backward (gradients all-reduced in buckets while backward runs; reduce-scattered under
// --zero 2), global-norm clipping, the optimizer step (under --zero 1|2 on this rank's shard, then
// the parameter all-gather). The loss is summed on the device and read only when a progress line
// is due (every --log-every steps and at a stop), so no step waits for the host except clipping's
// one read of the norm.
// --amp: backward from the loss times the loss scale (fp16; 1 for bf16), then the unscale + inf/NaN
// check of the 16-bit gradients into the f32 masters, one all-rank agreement on the flag
// (apps/trainer/step/amp.h), the loss scaler's update, and on a clean step clipping of the f32 master
// gradients, the update of the masters and their rounding into the model. A step with non-finite
// gradients is skipped on every rank: counted in the progress line and the metrics, its loss left
// out of the interval's mean.
// After each step the run control (apps/trainer/run/preemption.h) is asked, on every rank alike, whether
// to save now (--checkpoint-interval, before a stop) or stop (a preemption signal); either returns
// to the caller with the decision in LoopState::decision (the caller writes the checkpoint).
#pragma once
#include <cstddef>
#include <cstdint>

#include "apps/encoder/options.h"          // defines: EncoderOptions
#include "apps/encoder/report.h"           // defines: Interval
#include "apps/encoder/setup.h"            // defines: Training
#include "apps/trainer/run/clock.h"            // defines: RunClock
#include "apps/trainer/run/preemption.h"       // defines: RunControl, Decision
#include "apps/trainer/run/position.h"         // defines: Position
#include "apps/trainer/run/timeline_window.h"  // defines: TimelineWindow
#include "data/text_loader.h"              // defines: TextBatch

namespace tandem::apps::encoder {

struct LoopState {
  // Where the next step begins (steps and sequences since the start of training, across resumes;
  // the loader's epoch and the sequences of its order consumed), kept at a step boundary: an epoch
  // that ran out reads (epoch + 1, 0), the next epoch already started on the loader.
  trainer::Position pos;
  int64_t interval_steps = 0;  // steps since the last progress line
  int64_t interval_losses = 0; // of those, the steps whose loss is in loss_sum (not skipped)
  int64_t skipped_steps = 0;   // steps of this run whose update every rank skipped (--amp overflow)
  Tensor loss_sum;             // device-side sum of those steps' losses (undefined: none yet)
  double grad_norm = 0;        // the last step's, before clipping
  trainer::TimelineWindow comm;  // the interval's communication figures
  data::TextBatch batch;       // reused from step to step
  trainer::RunControl* control = nullptr;  // asked after every step (null: never)
  trainer::Decision decision;  // its last save/stop decision; train_until returns early on one
};

// Positions the training loader where t.start_at says the next step begins (start_epoch(epoch,
// offset): on any world size and batch, the sequences of the epoch's order not yet read).
LoopState start_loop(Training& t, const EncoderOptions& o);

// Trains until s.pos.step == until, printing progress lines; fills `last` at each one. Returns
// earlier when s.control decides to save or stop (s.decision says which).
void train_until(Training& t, const EncoderOptions& o, LoopState& s, int64_t until, trainer::RunClock& clock,
                 Interval& last);

}  // namespace tandem::apps::encoder
