// apps/train/checkpointing.cpp: writing train_imagenet's checkpoints (see checkpointing.h).
#include "apps/train/checkpointing.h"

#include "apps/train/setup.h"           // defines: Training
#include "apps/trainer/run/run_folder.h"    // defines: UsageError

namespace tandem::apps {

bool save_checkpoint_now(Training& t, const TrainOptions& o, const trainer::Position& at) {
  if (!t.folder.owned()) return false;
  TrainState s = trainer::train_state(at, t.world->size, t.global_batch, o.model);
  s.classes = t.data.classes;
  s.extra["lr_schedule"] = o.lr_schedule;
  s.extra["amp"] = o.amp;  // the precision a resume must use (the weights are stored in it)
  s.extra["optimizer"] = o.optimizer;  // a resume must use it: its state does not carry over
  s.extra["base_lr"] = std::to_string(t.sched.base_lr);
  // The run's length as the user gave it (--epochs or --steps), and the --steps schedule's unit: a
  // resume on any world size and batch continues the same schedule (apps/trainer/run/position.h).
  s.extra[o.steps > 0 ? "steps" : "epochs"] = std::to_string(o.steps > 0 ? o.steps : o.epochs);
  s.extra["schedule_global_batch"] = std::to_string(t.fresh_global_batch);
  s.extra["total_steps"] = std::to_string(t.length.schedule_total());  // in the schedule's unit
  // What --evaluate needs to rebuild the model and its input without flags (validation.h).
  s.extra["image_size"] = std::to_string(o.image_size);
  s.extra["num_classes"] = std::to_string(t.classes);
  if (t.ema) s.extra["model_ema_decay"] = std::to_string(t.ema->decay());
  // The optimizer state and --amp's f32 masters and loss scale, unsharded (apps/trainer/step/step.h);
  // under ZeRO every rank takes part in assembling it, and rank 0 receives it. --zero 3: the
  // weights are gathered whole for the write (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  NamedTensors opt_state = t.step->state();
  // --model-ema: "ema.<param>" beside the optimizer state (apps/trainer/step/ema.h); rank 0 writes.
  if (t.ema && t.world->rank == 0)
    for (auto& e : t.ema->state()) opt_state.push_back(std::move(e));
  t.step->check_state_finite(opt_state);  // every rank stops, nothing written, if any value is NaN/inf
  const std::string path = t.folder.write(*t.model, opt_state, s);
  // The run log's checkpoint event (plot_run.py's schema); the log is rank 0's, as is the path.
  // Its epoch counts from 1, as the file name does (checkpoint/checkpoint_dir.h).
  const int64_t epoch = s.epoch_offset == 0 ? s.epoch : s.epoch + 1;
  if (!path.empty()) t.log.write({{"event", "checkpoint"}, {"step", s.step}, {"epoch", epoch}, {"path", path}});
  return true;
}

}  // namespace tandem::apps
