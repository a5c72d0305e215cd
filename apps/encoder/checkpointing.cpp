// apps/encoder/checkpointing.cpp: restoring and writing train_encoder's checkpoints (see
// checkpointing.h).
#include "apps/encoder/checkpointing.h"

#include "apps/encoder/setup.h"       // defines: Training
#include "apps/trainer/run_folder.h"  // defines: UsageError

namespace tandem::apps::encoder {

CheckpointDirOptions folder_options(const EncoderOptions& o) {
  return trainer::folder_options(o, CheckpointNaming::step, "train_encoder");
}

Restored restore_checkpoint(const std::string& path, Module& model, const EncoderOptions& o, const dist::World& w) {
  (void)w;
  const TrainState head = read_train_state(path);  // the header: a mismatch is named before any tensor is read
  if (head.model != o.model)
    throw trainer::UsageError("checkpoint '" + path + "' holds a " + head.model + " but --model is " + o.model +
                              ": pass --model " + head.model + " or start without --resume");
  if (auto it = head.extra.find("optimizer"); it != head.extra.end() && it->second != o.optimizer)
    throw trainer::UsageError("checkpoint '" + path + "' was trained with --optimizer " + it->second +
                              ": resume with the same optimizer (its state does not carry over)");
  Checkpoint ck = load_checkpoint(path, model);
  return Restored{ck.state, std::move(ck.optimizer)};
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
  // The optimizer state and --amp's f32 masters and loss scale, unsharded (apps/trainer/step.h);
  // under ZeRO every rank takes part in assembling it, and rank 0 receives it. --zero 3: the
  // weights are gathered whole for the write (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  NamedTensors opt_state = t.step->state();
  // --model-ema: "ema.<param>" beside the optimizer state (apps/trainer/ema.h); rank 0 writes.
  if (t.ema && t.world->rank == 0)
    for (auto& e : t.ema->state()) opt_state.push_back(std::move(e));
  if (t.ema) s.extra["model_ema_decay"] = std::to_string(t.ema->decay());
  t.step->check_state_finite(opt_state);  // every rank stops, nothing written, if any value is NaN/inf
  t.folder.write(*t.model, opt_state, s);
  return true;
}

bool checkpoint_if_due(Training& t, const EncoderOptions& o, const trainer::Position& at, bool last) {
  const bool due = last || (o.checkpoint_every > 0 && at.step % o.checkpoint_every == 0);
  return due && save_checkpoint_now(t, o, at);
}

}  // namespace tandem::apps::encoder
