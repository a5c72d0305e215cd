// apps/train/checkpointing.cpp: resume and epoch-end checkpoints (see checkpointing.h).
#include "apps/train/checkpointing.h"

#include <cstdio>
#include <filesystem>

#include "apps/train/setup.h"        // defines: Training
#include "apps/trainer/position.h"   // defines: Position, train_state, resume_position
#include "layers/checkpoint_dir.h"     // defines: checkpoint_path, latest_checkpoint, prune_checkpoints

namespace tandem::apps {

std::string resume_path(const TrainOptions& o) {
  return o.resume == "auto" ? latest_checkpoint(o.checkpoint_dir, /*run_id=*/"") : o.resume;
}

Restored restore_checkpoint(const std::string& path, Module& model, const TrainOptions& o, const dist::World& w) {
  Checkpoint ck = load_checkpoint(path, model);
  Restored r{ck.state, std::move(ck.optimizer)};
  const TrainState& state = r.state;
  TANDEM_CHECK(state.model == o.model, "checkpoint '", path, "' holds a ", state.model, " but --model is ", o.model,
               ": pass --model ", state.model, " or start without --resume");
  TANDEM_CHECK(state.index_in_epoch == 0 || state.world_size == w.size, "checkpoint '", path,
               "' was written mid-epoch by ", state.world_size, " ranks; resume it with mpiexec -n ",
               state.world_size, " (epoch-end checkpoints resume on any number of ranks)");
  const trainer::Position at = trainer::resume_position(state);  // restores the default generator
  if (w.rank == 0)
    std::printf("resumed from %s at epoch %lld, step %lld\n", path.c_str(), (long long)at.epoch, (long long)at.step);
  return r;
}

bool checkpoint_if_due(const Training& t, const TrainOptions& o, int64_t epoch, int64_t step, int64_t index,
                       bool epoch_done, bool last_step) {
  if (o.checkpoint_dir.empty() || !(epoch_done || last_step)) return false;
  // Where the next step begins: an epoch that ran out resumes at the next one's start.
  const trainer::Position next{step, epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : index};
  TrainState s = trainer::train_state(next, t.world->size, o.model);
  s.extra["lr_schedule"] = o.lr_schedule;
  s.extra["base_lr"] = std::to_string(t.sched.base_lr);
  s.extra["total_steps"] = std::to_string(t.total_steps);
  // The optimizer state and --amp's f32 masters and loss scale, unsharded (apps/trainer/step.h);
  // under ZeRO every rank takes part in assembling it, and rank 0 receives it. --zero 3: the
  // weights are gathered whole for the write (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  const NamedTensors opt_state = t.step->state();
  if (t.world->rank == 0) {
    std::filesystem::create_directories(o.checkpoint_dir);
    // Mid-epoch saves (--checkpoint-every, a preemption) get their own name, never the epoch-end one.
    std::string path = checkpoint_path_for(o.checkpoint_dir, s, CheckpointNaming::epoch);
    save_checkpoint(path, *t.model, opt_state, s);
    std::printf("checkpoint: %s\n", path.c_str());
    prune_checkpoints(o.checkpoint_dir, o.keep_checkpoints, s.run_id, path);
  }
  return true;
}

}  // namespace tandem::apps
