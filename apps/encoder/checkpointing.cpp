// apps/encoder/checkpointing.cpp: restoring and writing train_encoder's checkpoints (see
// checkpointing.h).
#include "apps/encoder/checkpointing.h"

#include "apps/trainer/run/run_folder.h"  // defines: UsageError, read_resume_checkpoint

namespace tandem::apps::encoder {

CheckpointDirOptions folder_options(const EncoderOptions& o) {
  return trainer::folder_options(o, CheckpointNaming::step, "train_encoder");
}

Restored restore_checkpoint(const std::string& path, const EncoderOptions& o, const Training& t) {
  const TrainState head = read_train_state(path);  // the header: a mismatch is named before any tensor is read
  trainer::check_resume_header(path, head, o.model, o.optimizer);
  const bool rank0 = !t.world || t.world->rank == 0;
  Checkpoint ck = trainer::read_resume_checkpoint(path, rank0);
  // The canonical tensors as the model holds them (--tp: this rank's shards; BERT has no conv
  // layouts to convert), and its own extra state (--tp: the attention-dropout stream).
  ck.model = t.model->local_state_dict(std::move(ck.model));
  ck = apply_checkpoint(std::move(ck), path, *t.model);
  t.model->set_extra_state(ck.state.extra);
  return Restored{ck.state, std::move(ck.optimizer)};  // canonical: the Step takes its shard (step.h)
}

bool save_checkpoint_now(Training& t, const EncoderOptions& o, const trainer::Position& at) {
  if (!t.folder.owned()) return false;
  TrainState s = trainer::train_state(at, t.world->size, t.global_batch, o.model);
  s.extra["optimizer"] = o.optimizer;
  s.extra["total_steps"] = std::to_string(o.steps);  // --steps, in steps of the fresh start's global batch
  s.extra["schedule_global_batch"] = std::to_string(t.fresh_global_batch);
  s.extra["base_lr"] = std::to_string(t.sched.base_lr);
  s.extra["batch_per_rank"] = std::to_string(o.batch);
  s.extra["seq_len"] = std::to_string(o.seq_len);
  s.extra["vocab_size"] = std::to_string(t.corpus.vocab_size);
  s.extra["amp"] = o.amp;
  for (const auto& [key, value] : t.model->extra_state()) s.extra[key] = value;  // --tp: "tp", its dropout stream
  // The optimizer state and --amp's f32 masters and loss scale, canonical (apps/trainer/step/step.h):
  // under ZeRO every rank takes part in gathering it, and under --tp the first TP group in
  // assembling it; rank 0 receives it. --zero 3: the weights are gathered whole for the write
  // (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  NamedTensors opt_state = t.step->state();
  // --model-ema: "ema.<param>" beside the optimizer state (apps/trainer/step/ema.h), canonical
  // (--tp: assembled over the first TP group, as the weights are); rank 0 writes.
  if (t.ema && t.dp_rank == 0) {
    NamedTensors average = t.model->canonical_state_dict(t.ema->state());
    if (t.world->rank == 0)
      for (auto& e : average) opt_state.push_back(std::move(e));
  }
  if (t.ema) s.extra["model_ema_decay"] = std::to_string(t.ema->decay());
  t.step->check_state_finite(opt_state);  // every rank stops, nothing written, if any value is NaN/inf
  // The canonical model, written by rank 0: the model itself, or (--tp) assembled over the first TP
  // group (DP rank 0; the others hold no optimizer state), the 16-bit weights under --amp.
  if (t.dp_rank != 0) return true;
  t.model->with_canonical([&](const Module& whole) {
    const std::string path = t.folder.write(whole, opt_state, s);
    // The run log's checkpoint event (plot_run.py's schema); the log is rank 0's, as is the path.
    if (!path.empty()) t.log.write({{"event", "checkpoint"}, {"step", s.step}, {"path", path}});
  });
  return true;
}

bool checkpoint_if_due(Training& t, const EncoderOptions& o, const trainer::Position& at, bool last) {
  const bool due = last || (o.checkpoint_every > 0 && at.step % o.checkpoint_every == 0);
  return due && save_checkpoint_now(t, o, at);
}

}  // namespace tandem::apps::encoder
