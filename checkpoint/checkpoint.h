// checkpoint/checkpoint.h: training checkpoints - model, optimizer state and the position of the run,
// in one safetensors file that PyTorch can open; read whole and checked (sizes, digests) before use.
// The file's contents, exact resume and the two formats: checkpoint/README.md, "The file".
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/state_dict.h"

namespace tandem {

// Keep in step with project(tandem VERSION ...) in the top-level CMakeLists.txt.
inline constexpr const char* kTandemVersion = "0.1";
// Written as __metadata__["format"]; bump when the meaning of a field changes.
inline constexpr const char* kCheckpointFormat = "tandem-checkpoint-2";
// The earlier format, still read (see "Formats" above).
inline constexpr const char* kCheckpointFormat1 = "tandem-checkpoint-1";
// Whether a file's __metadata__["format"] is a training checkpoint this version reads.
bool is_checkpoint_format(const std::string& format);

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Where a run stands. Written on rank 0; identical on every rank by construction.
struct TrainState {
  // The run this checkpoint belongs to: 32 hex digits (128 random bits, new_run_id()), made by a
  // fresh start and kept across resumes. "" for format-1 files and callers that set none.
  std::string run_id;
  int64_t step = 0;             // optimizer steps completed since the start of training
  int64_t epoch = 0;            // the epoch the next step belongs to
  int64_t sampler_epoch = 0;    // the epoch the data sampler was set to (its shuffle seed)
  // Progress in samples, the world-size-independent position:
  int64_t samples = 0;          // global samples consumed since the start of training (-1: unknown,
                                // format-1 files without the batch size)
  int64_t epoch_offset = 0;     // positions of sampler_epoch's global order consumed (the sampler's
                                // prefix); 0 at an epoch end. Written as index_in_epoch x world_size
                                // when the caller leaves it 0 and sets index_in_epoch.
  int64_t global_batch = 0;     // samples per optimizer step over all ranks at save time (0: unknown)
  int64_t index_in_epoch = 0;   // samples this rank has consumed in sampler_epoch (0 at an epoch end);
                                // the per-rank form of epoch_offset in format-1 files (the apps write 0)
  int64_t world_size = 1;       // ranks that wrote it; index_in_epoch only means something at this size
  std::string model;            // the model's name, e.g. "resnet50"
  // The data set's class names in label order (train/'s folder names); empty for data sets without
  // names. Stored as a JSON array, so any name (commas, quotes, any UTF-8) round-trips; a name that
  // is not valid UTF-8 is refused at save time.
  std::vector<std::string> classes;
  std::string tandem_version = kTandemVersion;
  // When the file was written: UTC, ISO 8601 with microseconds ("2026-11-25T10:00:00.123456Z").
  // save_checkpoint stamps it (the caller's value is ignored); read from the file otherwise.
  std::string saved_at;
  std::map<std::string, GeneratorState> rng;    // named random streams, e.g. "default"
  std::map<std::string, std::string> extra;     // free-form settings (stored as extra.<key>)
};

// `t` as saved_at writes it: UTC, ISO 8601 with microseconds. Fixed width, so the strings sort
// in time order.
std::string utc_timestamp(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

// Run ids end up in file metadata, lock files and messages: 1 to 64 letters, digits, '.', '_', '-'.
bool is_valid_run_id(const std::string& id);

// A fresh run id: 32 lowercase hex digits from the OS's random source (std::random_device reads
// /dev/urandom on Linux). 128 bits, so ids of independent runs do not collide in practice.
std::string new_run_id();

struct Checkpoint {
  NamedTensors model;      // PyTorch names and layouts: pass to load_state_dict
  NamedTensors optimizer;  // names with the "optimizer." prefix removed (file layout from
                           // read_checkpoint, tandem layout from load_checkpoint)
  TrainState state;
  // Every tensor matched its digest (files written since format 2 carry one per tensor, checked on
  // read); false for an older file without digests, whose contents cannot be checked.
  bool verified = false;
};

// Writes atomically (see safetensors::save). Call on one rank only (rank 0).
// A crash hook (below), when set, is called instead of completing the write.
void save_checkpoint(const std::string& path, const Module& model, const NamedTensors& optimizer_state,
                     const TrainState& state);

// Reads and validates the file; tensors are on the CPU. Fails clearly when the file is not a tandem
// checkpoint, a field is malformed, the file is truncated or a tensor does not match its digest.
Checkpoint read_checkpoint(const std::string& path);

// "" when read_checkpoint(path) succeeds (the whole file read, digests checked); else its error.
std::string checkpoint_damage(const std::string& path);

// The TrainState alone, from the file's header (its tensors are not read): for listing a folder of
// checkpoints. Same checks and format-1 derivations as read_checkpoint.
TrainState read_train_state(const std::string& path);

// read_checkpoint + load_state_dict(model, ..., strict) with the file named in errors, and the
// optimizer state of conv weights converted back to tandem's OHWI layout.
Checkpoint load_checkpoint(const std::string& path, Module& model);
// load_checkpoint's second half, for a caller that read the file itself (to tell a damaged file
// from a model that does not fit): loads `c` (read from `path`) into model.
Checkpoint apply_checkpoint(Checkpoint c, const std::string& path, Module& model);

// Failure drills only (TANDEM_FAULT=0:S:crash-in-checkpoint, apps/train/faults.h): when a hook is
// set, save_checkpoint leaves what a process killed mid-write leaves - half of the file's bytes
// under the atomic writer's temporary name (safetensors::temp_path) and no file at `path` - and calls
// the hook with that temporary name. The hook is expected to end the process; if it returns,
// save_checkpoint throws. nullptr (the default) turns it off.
using CheckpointCrashHook = void (*)(const std::string& partial_path);
void set_checkpoint_crash_hook(CheckpointCrashHook hook);

}  // namespace tandem
