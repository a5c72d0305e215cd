// checkpoint/weights.h: start a model from pretrained weights - one call for the files people have
// (a PyTorch/HF state dict, a tandem checkpoint's model, a torch.save file): remap, skip globs, then
// every check before anything changes. The formats and checks: checkpoint/README.md, "Pretrained weights".
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/state_dict.h"

namespace tandem {

// File names -> model names. May rename, drop and check entries; throws to refuse the file.
using WeightsRemap = std::function<NamedTensors(const NamedTensors&)>;

struct WeightsOptions {
  bool strict = true;              // false: missing/unexpected names are reported, not refused
  std::vector<std::string> skip;   // globs; matching names are dropped from the file and the model
  WeightsRemap remap;              // empty: the file's names are the model's names
  // How the errors name `skip` to the user: a program passes its own word for it (the trainers: their
  // flag), and the advice then names only that (a command line has no remap or strict switch).
  std::string skip_name = "WeightsOptions::skip";
};

enum class WeightsFormat { StateDict, Checkpoint };

struct WeightsResult {
  WeightsFormat format = WeightsFormat::StateDict;
  int64_t checkpoint_step = -1;         // a checkpoint's step; -1 for a state dict
  std::vector<std::string> loaded;      // model tensors now holding the file's values
  std::vector<std::string> skipped;     // model tensors a skip pattern kept at their values (a new head)
  std::vector<std::string> dropped;     // file tensors a skip pattern dropped
  std::vector<std::string> missing;     // non-strict: model tensors absent from the file (unchanged)
  std::vector<std::string> unexpected;  // non-strict: file tensors the model does not have (ignored)
  std::vector<std::string> notes;       // casts, absent num_batches_tracked, a checkpoint's ignored state
};

// Loads `path` into `model` in place (handles held by optimizers and dist/ stay valid). See above.
WeightsResult load_weights(const std::string& path, Module& model, const WeightsOptions& options = {});

// A remap that removes `prefix` from every name that has it ("module." from a DDP-wrapped model).
WeightsRemap strip_prefix(std::string prefix);

// fnmatch-style glob on a whole name (exposed for tests and for apps that echo what a pattern hits).
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace tandem
