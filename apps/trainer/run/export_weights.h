// apps/trainer/run/export_weights.h: a training checkpoint -> the model's weights alone, as the state
// dict PyTorch users load (apps/export_weights.cpp writes it).
//
// A tandem checkpoint holds the model under its PyTorch names and layouts, and beside it the
// optimizer's state under "optimizer.*" (momentum, Adam moments, AMP's f32 masters, the EMA), so
// torchvision's load_state_dict(strict=True) refuses it for its unexpected keys. The export keeps
// the model's entries only, and takes:
//   - the f32 masters ("optimizer.amp.master.<param>") in place of a 16-bit model's parameters, so
//     an --amp run exports what it trained, not a rounded copy;
//   - with `ema`, the EMA ("optimizer.ema.<param>", --model-ema) in place of the parameters, under
//     the model's names; the buffers (BatchNorm's running statistics) stay the checkpoint's, which
//     are what validation of the EMA used (apps/trainer/step/ema.h). A checkpoint without an EMA is
//     refused with the flag that makes one.
// What a framework's loader expects beyond the names (Hugging Face's tied-decoder aliases) is the
// caller's: apps/encoder/hf_state_dict.h's to_hf_state_dict.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/state_dict.h"  // defines: NamedTensors

namespace tandem::trainer {

struct ExportedWeights {
  NamedTensors tensors;            // the model's names, PyTorch's layouts, in the checkpoint's order
  std::string model;               // the checkpoint's model name ("resnet50", "bert_tiny")
  std::vector<std::string> notes;  // what was taken from where, for the program to print
};

// Throws tandem::Error (not a tandem checkpoint; `ema` without an EMA in it).
ExportedWeights export_weights(const std::string& checkpoint, bool ema);

}  // namespace tandem::trainer
