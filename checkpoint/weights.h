// layers/weights.h: start a model from pretrained weights - one call for the files people have.
//
// load_weights(path, model) accepts, told apart by the file's metadata:
//   a plain state dict   PyTorch names and layouts (OIHW conv weights), as torchvision's or Hugging
//                        Face's state_dict() saved with safetensors.torch.save_file or save_pretrained
//                        (no metadata, or {"format": "pt"}). tandem's models carry torchvision's and
//                        HF's names already (layers/state_dict.h), so no table of names lives here.
//   a tandem checkpoint  __metadata__ format = kCheckpointFormat (layers/checkpoint.h): its model
//                        tensors; the "optimizer.*" entries and the run's position are ignored (that
//                        is resuming, not starting from weights).
//   a torch.save file    a .pth/.pt (a zip: core/torch_save.h) holding a state dict, or one under
//                        "model" or "state_dict"; read without running its pickle, anything that
//                        is not a state dict refused by name.
// Names that differ go through WeightsOptions::remap first: the encoder passes its Hugging Face
// mapping (tied-decoder and position_ids aliases checked and dropped), strip_prefix("module.")
// undoes a DDP-wrapped torch.save. Then skip patterns drop names from both sides, then the checks.
//
// Checks, all made before anything is changed, all problems in one error:
//   - strict (default): every model tensor must be in the file and nothing else may be, like
//     PyTorch's strict=True. One exception, as PyTorch's BatchNorm makes it: a missing
//     "*.num_batches_tracked" (files saved before PyTorch 0.4.1, such as torchvision's first ResNet
//     weights) leaves the counter as it is, with a note.
//   - shapes must match in every mode (PyTorch errors on them with strict=False too); the error
//     names each tensor with both shapes and points to WeightsOptions::skip for a classifier head
//     with another number of classes.
// Dtypes: a floating tensor is cast to the model's dtype when they differ (a bf16 or f16 HF file into
// an f32 model) and WeightsResult::notes says how many were; integer buffers must match.
// Skip patterns are globs (fnmatch: `*` any run of characters dots included, `?` one, `[..]` a set),
// matched against the model's names after remap: "fc.*", "classifier.6.*", "cls.predictions.*".
// Globs, not regexes: names are dotted paths, and in a regex "fc.*" would also match "fcx" and "fc".
// A pattern that matches no name on either side is an error (a typo would otherwise load silently
// into an unchanged head).
// Left out: sharded files (model-00001-of-00002.safetensors), pre-1.6 (tar) torch.save files and
// other pickles (HF's pytorch_model.bin from transformers >= 4 is the zip format, so it loads), and
// loading onto a differently shaped architecture by surgery.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "layers/state_dict.h"

namespace tandem {

// File names -> model names. May rename, drop and check entries; throws to refuse the file.
using WeightsRemap = std::function<NamedTensors(const NamedTensors&)>;

struct WeightsOptions {
  bool strict = true;              // false: missing/unexpected names are reported, not refused
  std::vector<std::string> skip;   // globs; matching names are dropped from the file and the model
  WeightsRemap remap;              // empty: the file's names are the model's names
  // How the errors name `skip` to the user: a program passes its flag ("--weights-skip"), and its
  // advice then names only that (a command line has no remap or strict switch).
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
