// apps/train/loop.cpp: one epoch of steps and its progress lines (see loop.h).
#include "apps/train/loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/train/checkpointing.h"  // defines: save_checkpoint_now (a save inside the epoch)
#include "core/autograd.h"          // defines: NoGradGuard
#include "core/ops/elementwise/elementwise.h"   // defines: add (the device-side running loss)
#include "core/ops/loss/loss.h"          // defines: cross_entropy, topk_correct, take_bad_label_count
#include "dist/transport/bootstrap.h"         // defines: comm_for (the CPU communicator for the progress sums)
#include "optim/lr_schedule.h"      // defines: lr_at

namespace tandem::apps {

using trainer::Clock;
using trainer::RunClock;

namespace {

// Adds a step's (not skipped) loss to the interval's device-side running sum.
void add_loss(LoopState& s, const Tensor& loss) {
  autograd::NoGradGuard ng;  // a device-side running sum: no host sync inside the interval
  s.loss_sum = s.loss_sum.defined() ? ops::add(s.loss_sum, loss.detach()) : loss.detach().clone();
}

// One optimizer step on s.batch. Returns the logits (the progress line's top-1 reads them).
Tensor train_step(Training& t, const TrainOptions& o, LoopState& s, RunClock& clock, RunRecord& rec) {
  trainer::Step& step = *t.step;
  const int rank = t.world->rank;
  const int64_t number = s.pos.step + 1;  // 1-based, as progress lines and TANDEM_FAULT count
  fault_before_step(s.fault, rank, number);
  step.set_lr(optim::lr_at_position(t.sched, t.length.schedule_position(s.pos)));
  const float smoothing = static_cast<float>(o.label_smoothing);
  // The Step hands out micro-batch m's rows (--grad-accum-steps), or under --cuda-graph its static
  // copies of the batch, which the captured step reads; it keeps the logits for the top-1.
  const trainer::StepResult r = step.run({s.batch.images, s.batch.labels}, [&](const std::vector<Tensor>& in, int) {
    Tensor out = step.forward(in[0]);
    step.keep(out);
    return fault_in_step(s.fault, rank, number, ops::cross_entropy(out, in[1], smoothing));
  });
  clock.step_issued(r.host_ms, r.replayed);
  ++s.pos.step, ++s.interval_steps, clock.interval_data_ms += s.batch.wait_ms;
  s.pos.samples += t.global_batch;  // every step takes a full global batch (the loader drops the rest)
  s.pos.epoch_offset = t.train->samples_consumed();
  if (!r.applied) {
    ++rec.skipped_steps;
    return r.kept[0];
  }
  ++s.interval_losses;
  add_loss(s, r.loss);
  return r.kept[0];
}

// Closes the progress interval: global loss (mean of per-step means) and last-batch top-1, reduced
// in one collective, into `last`; rank 0 prints it. Then starts the next interval.
// The interval's own compute time (wall minus data wait minus exposed communication) adds to
// rec.compute_s, measured before the progress collective so a fast rank's wait there is left out.
void log_progress(Training& t, int64_t epoch, const Tensor& logits, LoopState& s, RunClock& clock,
                  const TrainOptions& o, RunRecord& rec) {
  Interval& last = rec.last;
  const data::Batch& b = s.batch;
  const int world = t.world->size;
  // The last micro-batch's logits (--grad-accum-steps): the batch's last rows are its labels.
  const int64_t rows = logits.shape()[0], all = b.labels.shape()[0];
  const Tensor labels = rows == all ? b.labels : b.labels.slice(all - rows, all);
  double c1 = static_cast<double>(ops::topk_correct(logits, labels, 1));
  const float loss_sum = s.loss_sum.defined() ? s.loss_sum.to_vector()[0] : 0.0f;  // syncs the device
  // Labels outside [0, classes) that the CUDA loss clamped in this interval (core/ops/loss/loss.h): read
  // once per progress line, where the reads above have already synchronised the device.
  const auto bad_labels = static_cast<float>(t.dev.is_cuda() ? ops::take_bad_label_count() : 0);
  const double own_wall_ms = clock.interval_ms();
  Tensor sums = Tensor::from_vector({loss_sum, float(c1), float(labels.numel()), bad_labels}, {4});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "progress")->wait();
  std::vector<float> v = sums.to_vector();
  rec.bad_labels += static_cast<int64_t>(v[3]);
  if (v[3] > 0 && t.world->rank == 0)
    std::fprintf(stderr,
                 "train_imagenet: WARNING: %.0f labels outside [0, %lld) in steps %lld-%lld (all ranks); the CUDA "
                 "loss clamped them into range, so those steps' loss, accuracy and gradients are wrong. Check "
                 "the dataset's labels against its %lld classes.\n",
                 v[3], static_cast<long long>(t.classes), static_cast<long long>(s.pos.step - s.interval_steps + 1),
                 static_cast<long long>(s.pos.step), static_cast<long long>(t.classes));
  last.steps = s.interval_steps;
  last.wall_ms = clock.interval_ms();
  last.data_ms = clock.interval_data_ms;
  // Skipped steps (every rank skipped the same ones) have no loss in the sums.
  last.loss = s.interval_losses ? v[0] / (s.interval_losses * world) : std::nan("");
  last.top1 = v[1] / v[2];
  last.images_per_s = s.interval_steps * t.global_batch / (last.wall_ms / 1000);
  last.skipped_steps = rec.skipped_steps + t.step->skipped_unreported();  // + the device's (--cuda-graph --amp)
  last.loss_scale = t.step->loss_scale();
  last.host_ms = clock.interval_host_ms;
  last.graph_steps = clock.interval_graph_steps;
  last.graph_host_ms = clock.interval_graph_host_ms;
  const trainer::CommWindow w = s.comm.close(t.step->timeline());
  last.exposed_ms = w.exposed_ms, last.overlap = w.overlap;
  rec.compute_s += std::max(0.0, own_wall_ms - last.data_ms - last.exposed_ms * last.steps) / 1000;
  // The ETA counts the steps this invocation still takes (--run-epochs, --run-steps stop it early).
  int64_t end = t.end_step;
  if (t.end_epoch < t.epochs) end = std::min(end, t.end_epoch * t.steps_per_epoch);
  const trainer::Eta eta = trainer::eta(clock, s.pos.step - t.start_at.step, end - s.pos.step);
  if (t.world->rank == 0)
    std::printf("%s%s\n", progress_line(epoch, s.pos.step, t.total_steps, t.step->lr(), last, world, t.dev).c_str(),
                trainer::eta_text(eta).c_str());
  log_step(t, epoch, s.pos, last, eta);
  std::fflush(stdout);
  s.interval_steps = 0, s.interval_losses = 0, s.loss_sum = Tensor();
  clock.start_interval();
}

}  // namespace

bool steps_left(const Training& t, const LoopState& s) {
  return !t.length.done(s.pos) && s.pos.epoch < t.end_epoch && s.pos.step < t.end_step;
}

EpochEnd train_epoch(Training& t, const TrainOptions& o, LoopState& s, RunClock& clock, RunRecord& rec) {
  EpochEnd e;
  e.epoch = s.pos.epoch;
  // Mid-epoch on resume: the samples of the epoch's order not yet consumed, on any world size and batch.
  t.train->start_epoch(s.pos.epoch, s.pos.epoch_offset);
  while (steps_left(t, s) && t.train->next(s.batch)) {
    clock.step_started();
    Tensor logits = train_step(t, o, s, clock, rec);
    if (s.pos.step - t.start_at.step == t.bench_warmup) clock.start_steady(s.pos.step, t.dev);
    if (s.pos.step % o.log_every == 0 || s.pos.step == t.end_step)
      log_progress(t, e.epoch, logits, s, clock, o, rec);
    if (!s.control) continue;
    const trainer::Decision d = s.control->after_step(s.pos.step);
    // The epoch's last step, or the invocation's, is saved by the caller's checkpoint: one file, not two.
    const bool epoch_ends = t.train->batches_left() == 0 || !steps_left(t, s);
    if (d.save && !epoch_ends) {
      const trainer::RunClock::Paused paused(clock);  // paused time, as at epoch ends
      s.control->save([&] { return save_checkpoint_now(t, o, s.pos); });
    }
    if (d.stop) {
      e.stopped = true;
      break;
    }
  }
  // An epoch that ran out (also with the run's last step) is recorded as the next one's start.
  if (t.train->batches_left() == 0) {
    e.done = true;
    s.pos.epoch += 1, s.pos.epoch_offset = 0;
  }
  return e;
}

}  // namespace tandem::apps
