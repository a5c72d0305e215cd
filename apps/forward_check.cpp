// apps/forward_check.cpp: runs one forward pass of a tandem model on weights and an input saved by
// PyTorch, and writes the logits, so a script can compare tandem with PyTorch layer for layer
// semantics (apps/scripts/check_against_pytorch.py does).
//
//   forward_check --model resnet50 --weights sd.safetensors --input x.safetensors --output y.safetensors
//
// --weights: a torchvision state dict saved with safetensors.torch.save_file or torch.save (.pth/.pt,
// core/torch_save.h; PyTorch names, OIHW conv weights), or a train_imagenet checkpoint (its model
// weights are used, its optimizer.* state and run position are ignored). --input: a tensor named
// "input", NCHW f32 as PyTorch holds images; it is permuted to tandem's NHWC here. --output: "logits" [N, classes] f32. --mode eval uses BatchNorm's running
// statistics, --mode train the batch's (the running stats are then updated, as in PyTorch).
// CPU only: this is a correctness tool, not a benchmark.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/autograd.h"
#include "core/safetensors.h"
#include "core/torch_save.h"
#include "checkpoint/checkpoint.h"
#include "layers/models/models.h"
#include "checkpoint/state_dict.h"

using namespace tandem;

namespace {
// The model weights of `path`: a training checkpoint's model part, or a whole state-dict file.
LoadResult load_weights(const std::string& path, Module& model) {
  if (torch_save::is_torch_zip(path)) {  // a .pth/.pt state dict, read without running its pickle
    std::string wrapper;
    LoadOptions opt;
    opt.source = "torch.save file '" + path + "'";
    const NamedTensors sd = torch_save::load(path, &wrapper);
    if (!wrapper.empty()) std::printf("forward_check: %s: using its \"%s\" state dict\n", path.c_str(), wrapper.c_str());
    return load_state_dict(model, sd, opt);
  }
  safetensors::File f = safetensors::load(path);
  auto format = f.metadata.find("format");
  if (format == f.metadata.end() || !is_checkpoint_format(format->second)) return load_model(path, model);
  Checkpoint ck = read_checkpoint(path);
  LoadOptions opt;
  opt.source = "checkpoint '" + path + "'";
  std::printf("forward_check: %s is a %s training checkpoint (step %lld): using its model weights\n", path.c_str(),
              ck.state.model.c_str(), (long long)ck.state.step);
  return load_state_dict(model, ck.model, opt);
}

// [N, C, H, W] -> [N, H, W, C] on the host.
Tensor nchw_to_nhwc(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4 && x.dtype() == DType::F32, "--input must hold an f32 NCHW tensor, got ", x.str());
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor y = Tensor::empty({n, h, w, c});
  const float* s = x.data<float>();
  float* d = y.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t r = 0; r < h * w; ++r) d[(i * h * w + r) * c + k] = s[(i * c + k) * h * w + r];
  return y;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"forward_check: one forward pass on PyTorch-saved weights and input (CPU)"};
  std::string model_name, weights, input, output, mode = "eval";
  int num_classes = 1000;
  app.add_option("--model", model_name, "model name (see train_imagenet --help)")->required();
  app.add_option("--weights", weights, "torchvision state dict (safetensors, or a torch.save .pth/.pt), or a train_imagenet checkpoint")->required()->check(CLI::ExistingFile);
  app.add_option("--input", input, "safetensors file with an f32 NCHW tensor named 'input'")->required()->check(CLI::ExistingFile);
  app.add_option("--output", output, "where to write 'logits'")->required();
  app.add_option("--num-classes", num_classes, "classifier width")->capture_default_str();
  app.add_option("--mode", mode, "eval (running BN statistics) or train (batch statistics)")
      ->check(CLI::IsMember({"eval", "train"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    models::ModelOptions mo;
    mo.init = false;  // every tensor comes from --weights
    ModulePtr model = models::create_model(model_name, num_classes, 0, mo);
    LoadResult r = load_weights(weights, *model);
    model->train(mode == "train");
    Tensor x = nchw_to_nhwc(safetensors::load(input).at("input"));
    autograd::NoGradGuard no_grad;
    Tensor logits = (*model)(x);
    safetensors::save(output, {{"logits", logits}});
    std::printf("forward_check: %s on %s -> logits %s written to %s (%zu unexpected tensors ignored)\n",
                model_name.c_str(), x.str().c_str(), logits.str().c_str(), output.c_str(), r.unexpected.size());
  } catch (const Error& e) {
    std::fprintf(stderr, "forward_check: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
