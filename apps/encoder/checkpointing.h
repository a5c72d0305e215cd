// apps/encoder/checkpointing.h: train_encoder's side of layers/checkpoint.h.
//
// Files are "<dir>/checkpoint_step<N>.safetensors" (a text run is counted in steps), written by rank
// 0 every --checkpoint-every steps and after the run's last step, atomically; older ones beyond
// --keep-checkpoints are pruned. The model tensors carry Hugging Face's BertForMaskedLM names, so
// transformers loads the file directly (apps/scripts/check_encoder_against_pytorch.py does). The
// state records where the next step begins: the loader's epoch and the sequences this rank has read
// in it. A checkpoint taken inside an epoch resumes only on the same number of ranks (the shards
// differ otherwise), which restore_checkpoint checks. The optimizer state is the unsharded one, keyed
// by parameter name ("<param>.exp_avg"), also under --zero 1|2 (gathered from the shards, dist/zero.h),
// so a checkpoint resumes at any world size and ZeRO stage. Under --amp the model tensors are the
// 16-bit weights and the f32 masters ride beside the optimizer state ("amp.master.<param>", with the
// loss scaler's "amp.scaler.*": apps/trainer/amp.h), so resuming keeps the f32 bits.
#pragma once
#include <cstdint>
#include <string>

#include "apps/encoder/options.h"  // defines: EncoderOptions
#include "dist/transport/bootstrap.h"  // defines: World
#include "layers/checkpoint.h"     // defines: TrainState, NamedTensors
#include "layers/module.h"         // defines: Module

namespace tandem::apps::encoder {

struct Training;

std::string step_checkpoint_path(const std::string& dir, int64_t step);
// The newest checkpoint_step<N> in dir ("" when none).
std::string latest_step_checkpoint(const std::string& dir);
// --resume as a file ("auto": the newest in --checkpoint-dir, "" when none). Empty: fresh start.
std::string resume_path(const EncoderOptions& o);

struct Restored {
  TrainState state;
  NamedTensors optimizer;
};
// Loads `path` into `model`, restores the default generator and checks the checkpoint fits this run.
Restored restore_checkpoint(const std::string& path, Module& model, const EncoderOptions& o, const dist::World& w);

// Writes a checkpoint after `step` when one is due (every --checkpoint-every steps, or `last`).
// epoch / index_in_epoch: where the training loader stands. Returns whether one was written.
bool checkpoint_if_due(const Training& t, const EncoderOptions& o, int64_t step, int64_t epoch,
                       int64_t index_in_epoch, bool last);

}  // namespace tandem::apps::encoder
