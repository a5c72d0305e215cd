// apps/trainer/run/start_weights.h: a trainer's --weights FILE: a run that starts from given weights
// instead of its initialisation (fine-tuning, or evaluating published weights).
//
// checkpoint/weights.h does the work and tells the formats apart: a state dict with the PyTorch names
// (torchvision's, or Hugging Face's through the encoder's remap) saved with
// safetensors.torch.save_file, or a tandem checkpoint, of which only the model tensors are taken.
// Strict: every tensor of the model must come from the file, except those a --weights-skip glob
// names, which keep the fresh initialisation (a classifier head for another number of classes);
// the load then says in one line which were skipped. Every rank reads the file (they get the same
// values; DDP's broadcast from rank 0 follows anyway). A file that does not fit is a usage error on
// every rank alike (UsageError, exit 2), naming the tensors and --weights-skip.
// --weights and --resume together are refused by the trainers' option checks: a resume has its
// own weights.
#pragma once
#include <string>
#include <vector>

#include "layers/module.h"   // defines: Module
#include "checkpoint/weights.h"  // defines: WeightsResult, WeightsRemap

namespace tandem::trainer {

// Loads `path` into `model` (on its device, in its dtype: 16-bit under --amp), skipping `skip`
// globs, mapping names through `remap` first (empty: none). `print`: this rank prints the line.
WeightsResult load_start_weights(const std::string& path, Module& model, const std::vector<std::string>& skip,
                                 const WeightsRemap& remap, bool print);

// "weights: FILE (a state dict): 62 tensors loaded; 2 kept at their initialisation (--weights-skip):
// fc.weight, fc.bias" - the line load_start_weights prints.
std::string start_weights_line(const std::string& path, const WeightsResult& r);

}  // namespace tandem::trainer
