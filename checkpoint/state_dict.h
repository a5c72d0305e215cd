// checkpoint/state_dict.h: a Module's tensors under PyTorch's names and in PyTorch's layouts.
//
// Names are the Module's own (they already follow torch.nn.Module: "layer1.0.conv1.weight") and
// the order is PyTorch's state_dict order: for each module depth-first, its parameters, then its
// buffers, then its children. Buffers include BatchNorm's running_mean, running_var and the i64
// num_batches_tracked, exactly as torchvision saves them.
//
// Layouts: tandem keeps conv weights OHWI ([out, kh, kw, in/groups]) because activations are NHWC;
// PyTorch and the file hold OIHW ([out, in/groups, kh, kw]). Conv weights are recognised by module
// type (a module whose type_name() is "Conv2d" and its parameter "weight"), never by name, so a
// 4-D tensor elsewhere is left alone. Linear weights are [out, in] in both. Every other tensor is
// stored as is.
//
// Left out: dtype conversion on load unless asked for (LoadOptions::cast), and partial loading
// by prefix (filter the NamedTensors first).
#pragma once
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "layers/module.h"

namespace tandem {

using NamedTensors = safetensors::NamedTensors;

// The module's tensors in PyTorch layout, detached. Tensors whose layout is the same share storage
// with the module (no copy, like torch's state_dict); conv weights are permuted host copies.
NamedTensors state_dict(const Module& m);

struct LoadOptions {
  // true (default): every module tensor must be present and nothing extra may be, like PyTorch's
  // strict=True. false: missing and unexpected names are reported in LoadResult instead.
  bool strict = true;
  // false (default): a dtype mismatch is an error. true: floating tensors are cast to the module's
  // dtype (e.g. an f32 checkpoint into a bf16 model); integer buffers must still match.
  bool cast = false;
  // Names the source in error messages ("checkpoint 'runs/ckpt.safetensors'").
  std::string source = "the state dict";
  // What the error message advises for a mismatch. Empty: the library's own switches (load
  // non-strictly, LoadOptions::cast), for C++ callers. A caller whose user cannot reach those (a
  // training checkpoint resumed from a command line) says what that user can do instead.
  std::string advice;
};

struct LoadResult {
  std::vector<std::string> missing;     // module tensors absent from the input (left unchanged)
  std::vector<std::string> unexpected;  // input tensors the module does not have (ignored)
};

// Copies `sd` (PyTorch names and layouts, any device) into the module's tensors in place, so
// handles held by optimizers and dist/ stay valid. Checks names, shapes and dtypes first and
// throws one error listing every problem before anything is modified.
LoadResult load_state_dict(Module& m, const NamedTensors& sd, const LoadOptions& opt = {});

// Whole-file conveniences: the model alone in a safetensors file (a torchvision state dict saved
// with safetensors.torch.save_file loads with load_model).
void save_model(const std::string& path, const Module& m, const safetensors::Metadata& metadata = {});
LoadResult load_model(const std::string& path, Module& m, LoadOptions opt = {});

// Names of the tensors stored OHWI in tandem and OIHW in files (conv weights), for code that keeps
// per-parameter state of the same shape (optimizer momentum) and wants the file layout for it too.
std::vector<std::string> conv_weight_names(const Module& m);

// The layout permutations, exposed for tests and tools. Both take a 4-D tensor on any device and
// return a host tensor of the same dtype.
Tensor ohwi_to_oihw(const Tensor& w);
Tensor oihw_to_ohwi(const Tensor& w);

}  // namespace tandem
