// apps/export_weights.cpp: a training checkpoint -> a model-only safetensors file that PyTorch loads
// strictly (apps/trainer/run/export_weights.h):
//
//   export_weights --checkpoint run/checkpoint_epoch90.safetensors --output resnet50.safetensors [--ema]
//
// Image models: torchvision's state_dict() names, so
//   torchvision.models.resnet50().load_state_dict(safetensors.torch.load_file(F))   (strict)
// Encoders: Hugging Face's BertForMaskedLM state_dict() names, the tied decoder's aliases included.
// --ema exports --model-ema's average under the model's names. The file's metadata is {"format":
// "pt"}, as save_pretrained writes it.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/encoder/hf_state_dict.h"   // defines: to_hf_state_dict
#include "apps/trainer/run/export_weights.h"  // defines: export_weights
#include "core/check.h"
#include "core/safetensors.h"

using namespace tandem;

int main(int argc, char** argv) {
  CLI::App app{"export_weights: a checkpoint's model weights alone, for torchvision / Hugging Face (strict)"};
  std::string checkpoint, output;
  bool ema = false;
  app.add_option("--checkpoint", checkpoint, "a train_imagenet or train_encoder checkpoint")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--output,--export-weights", output, "the safetensors file to write")->required();
  app.add_flag("--ema", ema, "export the EMA of the weights (--model-ema) under the model's names");
  CLI11_PARSE(app, argc, argv);
  try {
    trainer::ExportedWeights w = trainer::export_weights(checkpoint, ema);
    const bool encoder = w.model.rfind("bert", 0) == 0;
    if (encoder) w.tensors = apps::encoder::to_hf_state_dict(w.tensors);
    safetensors::save(output, w.tensors, {{"format", "pt"}});
    for (const std::string& n : w.notes) std::printf("export_weights: %s\n", n.c_str());
    std::printf("export_weights: wrote %zu tensors with %s names to %s\n", w.tensors.size(),
                encoder ? "Hugging Face BertForMaskedLM" : "torchvision", output.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "export_weights: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
