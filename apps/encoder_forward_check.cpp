// apps/encoder_forward_check.cpp: one forward pass of tandem's BertForMaskedLM on a Hugging Face
// state dict and inputs saved by PyTorch, writing the MLM logits, so a script can compare tandem
// with transformers (apps/scripts/check_encoder_against_pytorch.py does).
//
//   encoder_forward_check --model bert_tiny --weights sd.safetensors --input x.safetensors --output y.safetensors
//
// --weights: BertForMaskedLM's state_dict() saved with safetensors.torch.save_file, or a
// train_encoder checkpoint; HF's alias entries are accepted and checked (apps/encoder/hf_state_dict.h).
// The vocabulary size is read from bert.embeddings.word_embeddings.weight. --input: "input_ids" and
// "attention_mask" (i64 [B, S]) and optionally "token_type_ids". --output: "logits" [B, S, V] f32.
// Eval mode (no dropout). CPU only: this is a correctness tool, not a benchmark.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/encoder/hf_state_dict.h"  // defines: from_hf_state_dict
#include "core/autograd.h"               // defines: NoGradGuard
#include "core/safetensors.h"            // defines: load, save
#include "core/torch_save.h"             // defines: is_torch_zip, load (.bin/.pth)
#include "layers/models/bert.h"          // defines: BertForMaskedLM, bert_config

using namespace tandem;

int main(int argc, char** argv) {
  CLI::App app{"encoder_forward_check: BertForMaskedLM logits on a Hugging Face state dict (CPU)"};
  std::string model_name, weights, input, output;
  app.add_option("--model", model_name, "bert_tiny, bert_mini, ... (the sizes must match the weights)")->required();
  app.add_option("--weights", weights, "HF BertForMaskedLM state dict (safetensors or torch.save: pytorch_model.bin) or train_encoder checkpoint")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--input", input, "safetensors with input_ids, attention_mask [, token_type_ids] (i64 [B, S])")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--output", output, "where to write 'logits' [B, S, V]")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    // safetensors, or a torch.save file (HF's pytorch_model.bin, a .pth) read without running its pickle.
    NamedTensors sd = apps::encoder::from_hf_state_dict(torch_save::is_torch_zip(weights)
                                                            ? torch_save::load(weights)
                                                            : safetensors::load(weights).tensors);
    int64_t vocab = -1;
    for (const auto& [name, t] : sd)
      if (name == "bert.embeddings.word_embeddings.weight") vocab = t.size(0);
    TANDEM_CHECK(vocab > 0, weights,
                 " has no bert.embeddings.word_embeddings.weight: is it a BertForMaskedLM state dict?");
    models::BertForMaskedLM model(models::bert_config(model_name, vocab), 0, /*init=*/false);
    LoadOptions lo;
    lo.source = "'" + weights + "'";
    load_state_dict(model, sd, lo);
    model.train(false);
    safetensors::File in = safetensors::load(input);
    const Tensor* types = in.find("token_type_ids");
    autograd::NoGradGuard no_grad;
    Tensor logits = model.forward(in.at("input_ids"), in.at("attention_mask"), types ? *types : Tensor());
    safetensors::save(output, {{"logits", logits}});
    std::printf("encoder_forward_check: %s (vocab %lld) on %s -> logits %s written to %s\n", model_name.c_str(),
                (long long)vocab, in.at("input_ids").str().c_str(), logits.str().c_str(), output.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "encoder_forward_check: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
