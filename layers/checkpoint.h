// layers/checkpoint.h: training checkpoints - model, optimizer state and the position of the run,
// in one safetensors file that PyTorch can open.
//
// File contents:
//   <model names>            the model's state_dict (PyTorch names and layouts, see state_dict.h)
//   optimizer.<name>         each optimizer state tensor (e.g. "optimizer.momentum.fc.weight"),
//                            named by the optimizer; this file does not interpret them, except
//                            that state named "<conv weight>.<x>" with the weight's shape is
//                            stored OIHW like the weight, so every tensor is in PyTorch's layout
//   __metadata__             strings: format, tandem_version, model, step, epoch, world_size,
//                            data.sampler_epoch, data.index_in_epoch, rng.<name>.seed/.offset,
//                            and any extra.<key> the caller adds (e.g. the LR schedule's settings)
//
// Exact resume: parameters, buffers and optimizer tensors are stored bit for bit; the LR schedule
// is a function of `step`; every random stream is a Generator (seed + counter offset, see
// core/random.h) restored exactly; the data order is a function of (seed, sampler epoch) and the
// position inside the epoch is `index_in_epoch`. Together these make "K steps" and "K/2 steps, save,
// resume, K/2 steps" bit-identical (tests/test_resume.cpp).
//
// The optimizer's state is passed as named tensors so this library stays below optim/ in the
// dependency order (layers -> core only); the app converts to and from its optimizer.
// Left out: ZeRO-sharded optimizer state (a checkpoint holds the full state) and async saving.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "layers/state_dict.h"

namespace tandem {

// Keep in step with project(tandem VERSION ...) in the top-level CMakeLists.txt.
inline constexpr const char* kTandemVersion = "0.1";
// Written as __metadata__["format"]; bump when the meaning of a field changes.
inline constexpr const char* kCheckpointFormat = "tandem-checkpoint-1";

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Where a run stands. Written on rank 0; identical on every rank by construction.
struct TrainState {
  int64_t step = 0;             // optimizer steps completed since the start of training
  int64_t epoch = 0;            // the epoch the next step belongs to
  int64_t sampler_epoch = 0;    // the epoch the data sampler was set to (its shuffle seed)
  int64_t index_in_epoch = 0;   // samples this rank has consumed in sampler_epoch (0 at an epoch end)
  int64_t world_size = 1;       // ranks that wrote it; index_in_epoch only means something at this size
  std::string model;            // --model name, e.g. "resnet50"
  std::string tandem_version = kTandemVersion;
  std::map<std::string, GeneratorState> rng;    // named random streams, e.g. "default"
  std::map<std::string, std::string> extra;     // free-form settings (stored as extra.<key>)
};

struct Checkpoint {
  NamedTensors model;      // PyTorch names and layouts: pass to load_state_dict
  NamedTensors optimizer;  // names with the "optimizer." prefix removed (file layout from
                           // read_checkpoint, tandem layout from load_checkpoint)
  TrainState state;
};

// Writes atomically (see safetensors::save). Call on one rank only (rank 0).
// A crash hook (below), when set, is called instead of completing the write.
void save_checkpoint(const std::string& path, const Module& model, const NamedTensors& optimizer_state,
                     const TrainState& state);

// Reads and validates the file; tensors are on the CPU. Fails clearly when the file is not a tandem
// checkpoint or a field is malformed.
Checkpoint read_checkpoint(const std::string& path);

// read_checkpoint + load_state_dict(model, ..., strict) with the file named in errors, and the
// optimizer state of conv weights converted back to tandem's OHWI layout.
Checkpoint load_checkpoint(const std::string& path, Module& model);

// "<dir>/checkpoint_epoch<N>.safetensors" and the newest such file in dir ("" when none).
std::string checkpoint_path(const std::string& dir, int64_t epoch);
std::string latest_checkpoint(const std::string& dir);
// Deletes all but the `keep` newest checkpoints in dir (keep <= 0: keeps all). Returns how many
// were removed. Only called after a new checkpoint was written (atomically), so the newest is safe.
int prune_checkpoints(const std::string& dir, int keep);

// Failure drills only (TANDEM_FAULT=0:S:crash-in-checkpoint, apps/train/faults.h): when a hook is
// set, save_checkpoint leaves what a process killed mid-write leaves - half of the file's bytes
// under the atomic writer's temporary name ("<path>.tmp.<pid>") and no file at `path` - and calls
// the hook with that temporary name. The hook is expected to end the process; if it returns,
// save_checkpoint throws. nullptr (the default) turns it off.
using CheckpointCrashHook = void (*)(const std::string& partial_path);
void set_checkpoint_crash_hook(CheckpointCrashHook hook);

}  // namespace tandem
