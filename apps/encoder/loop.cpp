// apps/encoder/loop.cpp: the steps and their progress lines (see loop.h).
#include "apps/encoder/loop.h"

#include <cmath>
#include <cstdio>

#include "core/autograd.h"         // defines: NoGradGuard
#include "core/ops/elementwise/elementwise.h"  // defines: add (the device-side running loss)
#include "dist/transport/bootstrap.h"        // defines: comm_for (the CPU communicator for the progress sums)
#include "optim/lr_schedule.h"     // defines: lr_at

namespace tandem::apps::encoder {

using trainer::Clock;
using trainer::RunClock;
using trainer::seconds_since;

namespace {

// The next training batch, across epoch ends; the time next() took counts as data time.
void next_batch(Training& t, LoopState& s, RunClock& clock) {
  const auto t0 = Clock::now();
  while (!t.train->next(s.batch)) {  // an epoch with no full batch left (a resume near its end)
    ++s.pos.epoch, s.pos.epoch_offset = 0;
    t.train->start_epoch(s.pos.epoch);
  }
  clock.interval_data_ms += seconds_since(t0) * 1000;
}

// The position after a step: one global batch more, and the epoch's order consumed so far, or the
// next epoch's start when this one ran out.
void advance(Training& t, LoopState& s) {
  ++s.pos.step;
  s.pos.samples += t.global_batch;
  s.pos.epoch_offset = t.train->samples_consumed();
  if (t.train->batches_left() == 0) {
    ++s.pos.epoch, s.pos.epoch_offset = 0;
    t.train->start_epoch(s.pos.epoch);
  }
}

void train_step(Training& t, LoopState& s) {
  const data::TextBatch& b = s.batch;
  trainer::Step& step = *t.step;
  step.set_lr(optim::lr_at_position(t.sched, t.length.schedule_position(s.pos)));
  // The Step hands out micro-batch m's rows of each (--grad-accum-steps).
  const trainer::StepResult r = step.run(
      {b.input_ids, b.attention_mask, b.token_type_ids, b.labels}, [&](const std::vector<Tensor>& in, int) {
        // The masked-LM loss, the same value on every rank of a TP group.
        return step.forward_with([&](Module&) { return t.model->mlm_loss(in[0], in[1], in[2], in[3]); });
      });
  if (r.grad_norm >= 0) s.grad_norm = r.grad_norm;  // clipping ran (on an applied step)
  advance(t, s);
  ++s.interval_steps;
  if (!r.applied) {
    ++s.skipped_steps;
    return;
  }
  ++s.interval_losses;
  autograd::NoGradGuard ng;  // a device-side running sum: no host sync inside the interval
  s.loss_sum = s.loss_sum.defined() ? ops::add(s.loss_sum, r.loss) : r.loss.clone();
}

// Closes the progress interval: the global mean loss in one collective; rank 0 prints the line.
void log_progress(Training& t, const EncoderOptions& o, LoopState& s, RunClock& clock, Interval& last) {
  const int world = t.world->size;
  Tensor sums = Tensor::from_vector({s.loss_sum.defined() ? s.loss_sum.to_vector()[0] : 0.0f}, {1});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "progress")->wait();
  last.steps = s.interval_steps;
  last.wall_ms = clock.interval_ms();
  last.data_ms = clock.interval_data_ms;
  // Skipped steps (every rank skipped the same ones) have no loss in the sums.
  last.loss = s.interval_losses ? sums.to_vector()[0] / static_cast<double>(s.interval_losses * world) : std::nan("");
  last.skipped_steps = s.skipped_steps;
  last.loss_scale = t.step->loss_scale();
  last.grad_norm = s.grad_norm;
  last.sequences_per_s = static_cast<double>(s.interval_steps * t.global_batch) / (last.wall_ms / 1000);
  last.tokens_per_s = last.sequences_per_s * static_cast<double>(o.seq_len);
  last.mfu = t.peak.flops > 0 ? last.tokens_per_s / world * t.flops_per_token / t.peak.flops : 0;
  const trainer::CommWindow w = s.comm.close(t.step->timeline());
  last.exposed_ms = w.exposed_ms, last.overlap = w.overlap;
  const trainer::Eta eta = trainer::eta(clock, s.pos.step - t.start_at.step, t.end_step - s.pos.step);
  if (t.world->rank == 0)
    std::printf("%s%s\n", progress_line(s.pos.step, t.total_steps, t.step->lr(), last, world, t.dev).c_str(),
                trainer::eta_text(eta).c_str());
  log_step(t, s.pos, last, eta);
  std::fflush(stdout);
  s.interval_steps = 0, s.interval_losses = 0, s.loss_sum = Tensor();
  clock.start_interval();
}

}  // namespace

LoopState start_loop(Training& t, const EncoderOptions& o) {
  (void)o;
  LoopState s;
  s.pos = t.start_at;
  t.train->start_epoch(s.pos.epoch, s.pos.epoch_offset);
  return s;
}

void train_until(Training& t, const EncoderOptions& o, LoopState& s, int64_t until, RunClock& clock, Interval& last) {
  while (s.pos.step < until) {
    clock.step_started();
    next_batch(t, s, clock);
    train_step(t, s);
    if (s.pos.step - t.start_at.step == t.bench_warmup) clock.start_steady(s.pos.step, t.dev);
    if (s.pos.step % o.log_every == 0 || s.pos.step == until) log_progress(t, o, s, clock, last);
    if (s.control && ((s.decision = s.control->after_step(s.pos.step)).save || s.decision.stop)) {
      if (s.pos.step % o.log_every != 0 && s.pos.step != until) log_progress(t, o, s, clock, last);  // the caller reports here
      return;
    }
  }
}

}  // namespace tandem::apps::encoder
