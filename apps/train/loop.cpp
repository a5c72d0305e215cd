// apps/train/loop.cpp: one epoch of steps and its progress lines (see loop.h).
#include "apps/train/loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/train/memory.h"     // defines: measure_memory
#include "core/autograd.h"          // defines: NoGradGuard
#include "core/ops/elementwise.h"   // defines: add (the device-side running loss), scale
#include "core/ops/copy.h"          // defines: cast_raw (--amp inputs)
#include "core/ops/loss.h"          // defines: cross_entropy, topk_correct, take_bad_label_count
#include "dist/transport/bootstrap.h"  // defines: comm_for (the CPU communicator for the progress sums)
#include "optim/clip.h"             // defines: clip_grad_norm (--clip-grad-norm)
#include "optim/lr_schedule.h"      // defines: lr_at

namespace tandem::apps {

namespace {

// Adds a step's (not skipped) loss to the interval's device-side running sum.
void add_loss(LoopState& s, const Tensor& loss) {
  autograd::NoGradGuard ng;  // a device-side running sum: no host sync inside the interval
  s.loss_sum = s.loss_sum.defined() ? ops::add(s.loss_sum, loss.detach()) : loss.detach().clone();
}

// --cuda-graph (graph_step.h): the step runs eagerly for the warm-up, then as a replayed graph. The
// option's checks left nothing to skip or sync in it. The one-off capture is not host time per step.
// A replay's collectives were captured, not issued, so dist's watchdog does not see them: the
// replay is handed to it as a whole (Communicator::watch_compute), an event after it on the compute
// stream - a hung or faulted replay then aborts every rank, naming the rank, like any collective.
Tensor graph_step(Training& t, const TrainOptions& o, LoopState& s, RunClock& clock, Clock::time_point issue_start) {
  const bool capturing = !t.graph->captured() && s.step - t.start.step >= t.graph->warmup();
  t.graph->step(t, o, s.batch);
  const bool replayed = t.graph->captured();  // this step ran as a replay (the capturing one too)
  if (replayed) dist::comm_for(t.dev).watch_compute("replayed step " + std::to_string(s.step + 1));
  double host_ms = seconds_since(issue_start) * 1000;
  if (capturing && t.graph->captured()) {
    host_ms -= t.graph->capture_ms();
    if (t.world->rank == 0)
      std::printf("cuda graph: captured step %lld (%zu nodes) in %.1f ms after %d eager steps; replaying it from "
                  "here on\n", (long long)(s.step + 1), t.graph->nodes(), t.graph->capture_ms(), t.graph->warmup());
  }
  clock.interval_host_ms += host_ms;
  if (replayed) clock.interval_graph_steps += 1, clock.interval_graph_host_ms += host_ms;
  measure_memory(t, s.batch);
  ++s.step, ++s.interval_steps, ++s.interval_losses, clock.interval_data_ms += s.batch.wait_ms;
  add_loss(s, t.graph->loss());
  return t.graph->logits();
}

// One optimizer step on s.batch. Returns the logits (the progress line's top-1 reads them).
Tensor train_step(Training& t, const TrainOptions& o, LoopState& s, RunClock& clock, RunRecord& rec) {
  const data::Batch& b = s.batch;
  const int rank = t.world->rank;
  const int64_t number = s.step + 1;  // 1-based, as progress lines and TANDEM_FAULT count
  fault_before_step(s.fault, rank, number);
  const Clock::time_point issue_start = Clock::now();  // host time issuing the step (clock.h)
  t.opt->set_lr(optim::lr_at(t.sched, s.step));
  if (t.ps) t.ps->set_lr(t.opt->lr());
  if (t.graph) return graph_step(t, o, s, clock, issue_start);
  // --amp: the model computes in 16-bit from its first layer on (the loader yields f32 images).
  Tensor logits = (*t.ddp)(t.amp ? ops::cast_raw(b.images, t.amp->low) : b.images);
  Tensor loss = ops::cross_entropy(logits, b.labels, static_cast<float>(o.label_smoothing));
  loss = fault_in_step(s.fault, rank, number, loss);
  if (t.zero) t.zero->zero_grad(*t.opt);
  else if (t.amp) t.opt->zero_grad();  // the f32 masters' gradients
  // The model's gradients are DDP's bucket views: one memset per bucket, and the first accumulation
  // copies instead of adding (reducer.h). ZeRO zeroes its own (it owns the shards).
  if (!t.zero) t.ddp->reducer().zero_grad();
  // Every rank, even with a bad loss: DDP's all-reduces must match across ranks. fp16 AMP scales
  // the loss so small gradients survive in 16-bit (optim/loss_scaler.h).
  (t.amp ? ops::scale(loss, static_cast<float>(t.amp->scaler.scale())) : loss).backward();
  clock.interval_host_ms += seconds_since(issue_start) * 1000;
  // Read after backward was queued, so the GPU has work while the host waits (nonfinite.h: cost).
  const bool loss_skip = s.on_nonfinite != OnNonfinite::Off &&
                         skip_nonfinite_step(s.on_nonfinite, loss.item(), number, "loss");
  bool skip = loss_skip;
  const Clock::time_point step_start = Clock::now();  // the wait in loss.item() is not host work
  if (t.ps) {
    if (!skip) t.ps->step(&t.ddp->timeline());  // push, update on the servers, pull
  } else if (!skip && t.amp) {
    // Unscale, agree on the skip, [clip the f32 master gradients], step, [ZeRO: all-gather].
    skip = !amp_step(*t.amp, *t.opt, o.clip_grad_norm);
  } else if (!skip) {
    // The global norm: under ZeRO each rank sums its shard's squares and sum_reduce adds them up.
    if (o.clip_grad_norm > 0)
      optim::clip_grad_norm(*t.opt, o.clip_grad_norm, t.zero ? t.zero->sum_reduce() : optim::SumSquaresReduce{});
    t.opt->step();
    if (t.zero) t.zero->gather_parameters();  // every rank's updated shard to every rank
  }
  clock.interval_host_ms += seconds_since(step_start) * 1000;
  if (!skip) measure_memory(t, b);  // once: the optimizer state exists from here on
  ++s.step, ++s.interval_steps, clock.interval_data_ms += b.wait_ms;
  if (skip) {
    ++rec.skipped_steps;
    return logits;
  }
  ++s.interval_losses;
  add_loss(s, loss);
  return logits;
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
  double c1 = static_cast<double>(ops::topk_correct(logits, b.labels, 1));
  const float loss_sum = s.loss_sum.defined() ? s.loss_sum.to_vector()[0] : 0.0f;  // syncs the device
  // Labels outside [0, classes) that the CUDA loss clamped in this interval (core/ops/loss.h): read
  // once per progress line, where the reads above have already synchronised the device.
  const auto bad_labels = static_cast<float>(t.dev.is_cuda() ? ops::take_bad_label_count() : 0);
  const double own_wall_ms = clock.interval_ms();
  Tensor sums = Tensor::from_vector({loss_sum, float(c1), float(b.labels.numel()), bad_labels}, {4});
  dist::comm_for(Device::cpu()).all_reduce(sums, dist::ReduceOp::Sum, "progress")->wait();
  std::vector<float> v = sums.to_vector();
  rec.bad_labels += static_cast<int64_t>(v[3]);
  if (v[3] > 0 && t.world->rank == 0)
    std::fprintf(stderr,
                 "train_imagenet: WARNING: %.0f labels outside [0, %lld) in steps %lld-%lld (all ranks); the CUDA "
                 "loss clamped them into range, so those steps' loss, accuracy and gradients are wrong. Check "
                 "the dataset's labels against its %lld classes.\n",
                 v[3], static_cast<long long>(t.classes), static_cast<long long>(s.step - s.interval_steps + 1),
                 static_cast<long long>(s.step), static_cast<long long>(t.classes));
  last.steps = s.interval_steps;
  last.wall_ms = clock.interval_ms();
  last.data_ms = clock.interval_data_ms;
  // Skipped steps (every rank skipped the same ones) have no loss in the sums.
  last.loss = s.interval_losses ? v[0] / (s.interval_losses * world) : std::nan("");
  last.top1 = v[1] / v[2];
  last.images_per_s = s.interval_steps * o.batch * world / (last.wall_ms / 1000);
  last.skipped_steps = rec.skipped_steps;
  last.loss_scale = t.amp ? t.amp->scaler.scale() : 0;
  last.host_ms = clock.interval_host_ms;
  last.graph_steps = clock.interval_graph_steps;
  last.graph_host_ms = clock.interval_graph_host_ms;
  const CommWindow w = comm_window(t.ddp->timeline(), s.timeline_from);
  last.exposed_ms = w.exposed_ms, last.overlap = w.overlap;
  rec.compute_s += std::max(0.0, own_wall_ms - last.data_ms - last.exposed_ms * last.steps) / 1000;
  if (t.world->rank == 0)
    std::printf("%s\n", progress_line(epoch, s.step, t.total_steps, t.opt->lr(), last, world, t.dev).c_str());
  std::fflush(stdout);
  s.timeline_from = t.ddp->timeline().steps().size();
  s.interval_steps = 0, s.interval_losses = 0, s.loss_sum = Tensor();
  clock.start_interval();
}

}  // namespace

EpochEnd train_epoch(Training& t, const TrainOptions& o, int64_t epoch, LoopState& s, RunClock& clock,
                     RunRecord& rec) {
  t.train->start_epoch(epoch);
  EpochEnd e;
  if (epoch == t.start.epoch && t.start.index_in_epoch > 0) {  // mid-epoch resume: same batches as before
    for (int64_t k = 0; k < t.start.index_in_epoch / o.batch && t.train->next(s.batch); ++k) e.index += o.batch;
  }
  while (s.step < t.total_steps) {
    if (!t.train->next(s.batch)) {
      e.done = true;
      break;
    }
    clock.step_started();
    Tensor logits = train_step(t, o, s, clock, rec);
    e.index += o.batch;
    if (s.step - t.start.step == t.bench_warmup) clock.start_steady(s.step, t.dev);
    if (s.step % o.log_every == 0 || s.step == t.total_steps) log_progress(t, epoch, logits, s, clock, o, rec);
  }
  e.done = e.done || e.index >= t.steps_per_epoch * o.batch;  // the last step may also end the epoch
  return e;
}

}  // namespace tandem::apps
