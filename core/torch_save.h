// core/torch_save.h: the state dict in a PyTorch torch.save file (.pth/.pt), read without running
// any of it.
//
// A torch.save file (PyTorch >= 1.6) is a zip (core/zip_stored.h) of <archive>/data.pkl - a pickle,
// protocol 2 - and <archive>/data/<key>, one raw little-endian storage per key. A pickle is a
// program for a stack machine that may import and call anything; Python's unpickler runs it. This
// reader runs none of it: it interprets only the opcodes a state dict's pickle uses (containers,
// strings, numbers, memo, MARK/TUPLE, REDUCE, BUILD, BINPERSID) and only these globals, each given
// its meaning here rather than imported:
//   collections.OrderedDict                     an empty dict (BUILD's attributes, such as a state
//                                               dict's _metadata, are dropped)
//   torch._utils._rebuild_tensor_v2             a tensor: storage, offset, size, stride (copied out,
//                                               so views and slices come out contiguous)
//   torch._utils._rebuild_parameter             the tensor inside an nn.Parameter
//   torch.{Float,Double,Half,BFloat16,Long,Int}Storage   the dtype of a persistent storage id
//                                               ("storage", type, key, location, numel)
// Any other opcode or global is refused by name (os.system, argparse.Namespace, numpy scalars, ...)
// before anything else happens. The top-level object must be a dict of tensors, or a dict holding
// one under "model" or "state_dict" (the wrappers of torchvision's and many training scripts'
// checkpoints); its other entries must be plain values.
// Left out: the legacy (pre-1.6) tar format, big-endian files, dtypes tandem has no tensor for
// (bool, uint8, int8, int16: refused with the list), and anything not a state dict (whole pickled
// modules, optimizer states).
#pragma once
#include <string>

#include "core/safetensors.h"  // defines: NamedTensors

namespace tandem::torch_save {

// True when `path` starts like a zip archive - how a .pth is told from a safetensors file.
bool is_torch_zip(const std::string& path);

// The state dict of `path`, tensors on the CPU in the pickle's order; `wrapper` gets "model" or
// "state_dict" when it was taken from such an entry, else "". Throws tandem::Error naming what it
// refused and what to do.
safetensors::NamedTensors load(const std::string& path, std::string* wrapper = nullptr);

// The same on a file's bytes in memory (`path` only names them in messages).
safetensors::NamedTensors load_bytes(std::string bytes, const std::string& path, std::string* wrapper = nullptr);

}  // namespace tandem::torch_save
