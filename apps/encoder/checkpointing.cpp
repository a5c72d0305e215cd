// apps/encoder/checkpointing.cpp: restoring and writing train_encoder's checkpoints (see
// checkpointing.h).
#include "apps/encoder/checkpointing.h"

#include "apps/trainer/run/run_folder.h"  // defines: UsageError
#include <map>

#include "core/random.h"              // defines: Generator
#include "dist/tp/shard.h"            // defines: shard_state_dict, gather_state_dict
#include "layers/amp_cast.h"          // defines: cast_for_amp
#include "checkpoint/state_dict.h"        // defines: state_dict, load_state_dict

namespace tandem::apps::encoder {

namespace {

const std::string kMaster = "amp.master.";  // apps/trainer/step/amp.h's prefix of the f32 masters

// --tp with --amp: the f32 masters are stored flat ("amp.master.<param>" of [numel], as
// optim::assemble_state writes them, with or without TP), and dist/tp/shard.h splits a tensor along
// its parameter's dimension only when it has the parameter's shape. So they take the parameter's
// shape (`shapes`: name -> shape) around the split and are flat again after it.
NamedTensors masters_shaped(NamedTensors s, const std::map<std::string, Shape>& shapes) {
  for (auto& [key, t] : s)
    if (key.rfind(kMaster, 0) == 0)
      if (auto it = shapes.find(key.substr(kMaster.size())); it != shapes.end() && t.numel() == shape_numel(it->second))
        t = t.view(it->second);
  return s;
}

NamedTensors masters_flat(NamedTensors s) {
  for (auto& [key, t] : s)
    if (key.rfind(kMaster, 0) == 0) t = t.view({t.numel()});
  return s;
}

// This rank's parameter shapes (its TP shards), or the canonical ones (`canonical`: the split
// dimension at its full size).
std::map<std::string, Shape> param_shapes(const Training& t, bool canonical) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : t.tp_model->named_parameters()) {
    Shape shape = p.shape();
    if (auto it = t.tp_layout.find(name); canonical && it != t.tp_layout.end()) shape[it->second.dim] = it->second.full;
    shapes[name] = shape;
  }
  return shapes;
}

}  // namespace

CheckpointDirOptions folder_options(const EncoderOptions& o) {
  return trainer::folder_options(o, CheckpointNaming::step, "train_encoder");
}

Restored restore_checkpoint(const std::string& path, Module& model, const EncoderOptions& o, const Training& t) {
  const TrainState head = read_train_state(path);  // the header: a mismatch is named before any tensor is read
  if (head.model != o.model)
    throw trainer::UsageError("checkpoint '" + path + "' holds a " + head.model + " but --model is " + o.model +
                              ": pass --model " + head.model + " or start without --resume");
  if (auto it = head.extra.find("optimizer"); it != head.extra.end() && it->second != o.optimizer)
    throw trainer::UsageError("checkpoint '" + path + "' was trained with --optimizer " + it->second +
                              " but this run asks for --optimizer " + o.optimizer + ": resume with --optimizer " +
                              it->second + " (its state does not carry over)");
  const bool rank0 = !t.world || t.world->rank == 0;
  if (!t.grid) {
    Checkpoint ck = apply_checkpoint(trainer::read_resume_checkpoint(path, rank0), path, model);
    return Restored{ck.state, std::move(ck.optimizer)};
  }
  // TP: this rank's shard of every canonical tensor (BERT has no conv layouts to convert).
  Checkpoint ck = trainer::read_resume_checkpoint(path, rank0);
  const int r = t.grid->tp_rank(), n = t.grid->tp_size();
  load_state_dict(model, dist::tp::shard_state_dict(ck.model, t.tp_layout, r, n));
  if (auto it = ck.state.extra.find("tp"); it != ck.state.extra.end() && it->second == std::to_string(n))
    if (auto off = ck.state.extra.find("tp_attention_rng_offset"); off != ck.state.extra.end()) {
      Generator& g = t.tp_model->attention_generator();
      g.set_state(g.seed(), std::stoull(off->second));
    }
  return Restored{ck.state, masters_flat(dist::tp::shard_state_dict(masters_shaped(ck.optimizer, param_shapes(t, true)),
                                                                     t.tp_layout, r, n))};
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
  // The optimizer state and --amp's f32 masters and loss scale, unsharded (apps/trainer/step/step.h);
  // under ZeRO every rank takes part in assembling it, and rank 0 receives it. --zero 3: the
  // weights are gathered whole for the write (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  NamedTensors opt_state = t.step->state();
  // --model-ema: "ema.<param>" beside the optimizer state (apps/trainer/step/ema.h); rank 0 writes.
  if (t.ema && t.world->rank == 0)
    for (auto& e : t.ema->state()) opt_state.push_back(std::move(e));
  if (t.ema) s.extra["model_ema_decay"] = std::to_string(t.ema->decay());
  t.step->check_state_finite(opt_state);  // every rank stops, nothing written, if any value is NaN/inf
  // The run log's checkpoint event (plot_run.py's schema); the log is rank 0's, as is the path.
  auto logged = [&](const std::string& path) {
    if (!path.empty()) t.log.write({{"event", "checkpoint"}, {"step", s.step}, {"path", path}});
  };
  if (!t.grid) {
    logged(t.folder.write(*t.model, opt_state, s));
    return true;
  }
  // TP: the first TP group (DP rank 0, which holds the state) assembles the canonical tensors;
  // rank 0 writes them through a canonical model (its init skipped: every tensor is overwritten).
  s.extra["tp"] = std::to_string(t.grid->tp_size());
  s.extra["tp_attention_rng_offset"] = std::to_string(t.tp_model->attention_generator().offset());
  if (t.dp_rank != 0) return true;
  dist::Communicator& tp = t.grid->tp();
  const NamedTensors model_state = dist::tp::gather_state_dict(state_dict(*t.tp_model), t.tp_layout, tp);
  const NamedTensors canonical_opt =
      masters_flat(dist::tp::gather_state_dict(masters_shaped(opt_state, param_shapes(t, false)), t.tp_layout, tp));
  if (t.world->rank == 0) {
    models::BertForMaskedLM canonical(t.config, o.seed, false);
    // --amp: the file holds the 16-bit weights, as a run without TP writes them.
    if (t.step->compute_dtype() != DType::F32) cast_for_amp(canonical, t.step->compute_dtype());
    load_state_dict(canonical, model_state);
    logged(t.folder.write(canonical, canonical_opt, s));
  }
  return true;
}

bool checkpoint_if_due(Training& t, const EncoderOptions& o, const trainer::Position& at, bool last) {
  const bool due = last || (o.checkpoint_every > 0 && at.step % o.checkpoint_every == 0);
  return due && save_checkpoint_now(t, o, at);
}

}  // namespace tandem::apps::encoder
