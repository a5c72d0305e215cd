// apps/encoder/checkpointing.h: train_encoder's side of checkpoint/checkpoint.h.
//
// Files are "<dir>/checkpoint_step<N>.safetensors" (a text run is counted in steps), written by rank
// 0 every --checkpoint-every steps and after this invocation's last step, atomically, through the
// folder this run owns (apps/trainer/run/run_folder.h: lock, fresh-start refusal, --resume auto's
// choice, pruning of this run's files only), and only from finite state (the weights and optimizer
// state are checked first, under every --on-nonfinite policy; a non-finite value stops every rank,
// exit 3). The model tensors carry Hugging Face's BertForMaskedLM names, so transformers loads the
// file directly (apps/scripts/check_encoder_against_pytorch.py does). The state records where the
// next step begins in samples (apps/trainer/run/position.h): the loader's epoch and the sequences of
// its order consumed, or (epoch + 1, 0) when the epoch ran out. So every checkpoint, also one taken
// inside an epoch, resumes on any number of ranks and any --batch: the loader continues the
// epoch's order from that offset and the LR schedule continues in samples. The optimizer state is
// the unsharded one, keyed by parameter name ("<param>.exp_avg"), also under --zero 1|2 (gathered
// from the shards, dist/zero.h), so a checkpoint resumes at any world size and ZeRO stage. Under
// --amp the model tensors are the 16-bit weights and the f32 masters ride beside the optimizer state
// ("amp.master.<param>", with the loss scaler's "amp.scaler.*": apps/trainer/step/amp.h), so resuming
// keeps the f32 bits.
// --tp T > 1: the files are the same canonical ones, and this file reads the same for any T. Each
// owner maps its own tensors: the model (layers/models/masked_lm.h, dist/tp/bert.h) assembles its
// canonical form over the TP group for rank 0 to write (with_canonical) and takes its shard of a
// file's (local_state_dict); the Step's optimizer state leaves state() canonical and load_state()
// shards it (apps/trainer/step/strategy_tp.cpp). Both split name-keyed tensors like their
// parameter (dist/tp/shard.h). So a checkpoint written at --tp 2 resumes at --tp 1 (any world size)
// and the reverse. The TP attention-dropout stream (the model's extra state) is saved as
// extra.tp_attention_rng_offset and restored only at the same T (its offset counts this rank's
// heads' draws); at another T it restarts from its seed, which only matters with dropout on.
#pragma once
#include <cstdint>
#include <string>

#include "apps/encoder/options.h"      // defines: EncoderOptions
#include "apps/encoder/setup.h"        // defines: Training, Restored
#include "apps/trainer/run/position.h"     // defines: Position
#include "dist/transport/bootstrap.h"  // defines: World
#include "checkpoint/checkpoint.h"         // defines: TrainState, NamedTensors
#include "checkpoint/checkpoint_dir.h"     // defines: CheckpointDirOptions
#include "layers/module.h"             // defines: Module

namespace tandem::apps::encoder {

// The checkpoint folder's settings from the flags; dir empty: no folder.
CheckpointDirOptions folder_options(const EncoderOptions& o);

// Loads `path` into t.model (set_up's RestoreCheckpoint) after checking, from its header, that it
// fits this run (the same --model and --optimizer: trainer::UsageError on every rank otherwise).
// Returns the file's optimizer entries as they are (canonical: the Step shards them under --tp).
Restored restore_checkpoint(const std::string& path, const EncoderOptions& o, const Training& t);

// Writes a checkpoint of the run at `at` (the loop's position, LoopState::pos, kept at a step
// boundary). Collective (ZeRO's gather, the finite-state check); rank 0 writes. Returns whether one
// was written (false without --checkpoint-dir). Throws trainer::RunStopped on every rank, writing
// nothing, when the state holds a non-finite value.
bool save_checkpoint_now(Training& t, const EncoderOptions& o, const trainer::Position& at);

// Writes one when due after the step `at` ends: every --checkpoint-every steps, or `last`.
bool checkpoint_if_due(Training& t, const EncoderOptions& o, const trainer::Position& at, bool last);

}  // namespace tandem::apps::encoder
