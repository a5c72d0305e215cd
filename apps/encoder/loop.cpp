// apps/encoder/loop.cpp: the steps and their progress lines (see loop.h).
#include "apps/encoder/loop.h"

#include <cmath>
#include <cstdio>

#include "core/autograd.h"         // defines: NoGradGuard
#include "core/ops/elementwise.h"  // defines: add (the device-side running loss), scale (--amp)
#include "dist/transport/bootstrap.h"  // defines: comm_for (the CPU communicator for the progress sums)
#include "optim/lr_schedule.h"     // defines: lr_at

namespace tandem::apps::encoder {

namespace {

// The next training batch, across epoch ends; the time next() took counts as data time.
void next_batch(Training& t, LoopState& s, RunClock& clock) {
  const auto t0 = Clock::now();
  while (!t.train->next(s.batch)) {
    ++s.epoch, s.index_in_epoch = 0;
    t.train->start_epoch(s.epoch);
  }
  s.index_in_epoch += s.batch.input_ids.size(0);
  clock.interval_data_ms += seconds_since(t0) * 1000;
}

// --amp's update (see loop.h): returns false when every rank skipped it.
bool amp_update(Training& t, const EncoderOptions& o, LoopState& s) {
  AmpRun& amp = *t.amp;
  // The 16-bit gradients: whole parameters' (DDP), or this rank's shard views (--zero 1|2).
  const bool found = amp.master->unscale_and_check(amp.zero ? amp.zero->grads() : amp.master->model_grads(),
                                                   1.0 / amp.scaler.scale());
  if (!amp.scaler.update(any_rank_found_inf(found))) return false;  // under ZeRO each rank saw a shard
  t.opt->set_grads(amp.master->master_grads());
  if (o.clip > 0) s.grad_norm = t.opt->clip_grad_norm(o.clip);  // summed over the shards under ZeRO
  t.opt->step();
  amp.master->copy_to_model();
  if (amp.zero) amp.zero->gather_parameters();  // every rank's updated 16-bit shard to every rank
  return true;
}

void train_step(Training& t, const EncoderOptions& o, LoopState& s) {
  const data::TextBatch& b = s.batch;
  t.opt->set_lr(optim::lr_at(t.sched, s.step));
  Tensor loss = t.ddp->forward_with(
      [&](Module&) { return t.model->mlm_loss(b.input_ids, b.attention_mask, b.token_type_ids, b.labels); });
  // The gradients backward accumulates into: DDP's bucket views (AMP: the 16-bit ones; the masters'
  // are overwritten by the unscale), or under ZeRO the buckets and shards (ParamGroups::zero_grad).
  if (t.amp && !t.zero) t.ddp->reducer().zero_grad();
  else t.opt->zero_grad();
  (t.amp ? ops::scale(loss, static_cast<float>(t.amp->scaler.scale())) : loss).backward();
  bool applied = true;
  if (t.amp) {
    applied = amp_update(t, o, s);
  } else {
    if (o.clip > 0) s.grad_norm = t.opt->clip_grad_norm(o.clip);
    t.opt->step();  // under ZeRO followed by the parameter all-gather
  }
  if (applied) measure_state_memory(t);  // once: the optimizer state exists from here on
  ++s.step, ++s.interval_steps;
  if (!applied) {
    ++s.skipped_steps;
    return;
  }
  ++s.interval_losses;
  autograd::NoGradGuard ng;  // a device-side running sum: no host sync inside the interval
  s.loss_sum = s.loss_sum.defined() ? ops::add(s.loss_sum, loss.detach()) : loss.detach().clone();
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
  last.loss_scale = t.amp ? t.amp->scaler.scale() : 0;
  last.grad_norm = s.grad_norm;
  last.sequences_per_s = static_cast<double>(s.interval_steps * t.global_batch) / (last.wall_ms / 1000);
  last.tokens_per_s = last.sequences_per_s * static_cast<double>(o.seq_len);
  last.mfu = t.peak.flops > 0 ? last.tokens_per_s / world * t.flops_per_token / t.peak.flops : 0;
  const CommWindow w = comm_window(t.ddp->timeline(), s.timeline_from);
  last.exposed_ms = w.exposed_ms, last.overlap = w.overlap;
  if (t.world->rank == 0)
    std::printf("%s\n", progress_line(s.step, o.steps, t.opt->lr(), last, world, t.dev).c_str());
  std::fflush(stdout);
  s.timeline_from = t.ddp->timeline().steps().size();
  s.interval_steps = 0, s.interval_losses = 0, s.loss_sum = Tensor();
  clock.start_interval();
}

}  // namespace

LoopState start_loop(Training& t, const EncoderOptions& o) {
  LoopState s;
  s.step = t.start.step;
  s.epoch = t.start.epoch;
  t.train->start_epoch(s.epoch);
  if (t.start.index_in_epoch > 0) {  // inside an epoch: the batches an uninterrupted run reads next
    t.train->skip(t.start.index_in_epoch / o.batch);
    s.index_in_epoch = t.start.index_in_epoch;
  }
  return s;
}

void train_until(Training& t, const EncoderOptions& o, LoopState& s, int64_t until, RunClock& clock, Interval& last) {
  while (s.step < until) {
    clock.step_started();
    next_batch(t, s, clock);
    train_step(t, o, s);
    if (s.step - t.start.step == t.bench_warmup) clock.start_steady(s.step, t.dev);
    if (s.step % o.log_every == 0 || s.step == until) log_progress(t, o, s, clock, last);
  }
}

}  // namespace tandem::apps::encoder
