// layers/amp_cast.h: casts a model for mixed precision as the AMP policy (core/autocast.h) says.
//
// Module::to(dtype) casts every floating tensor. Under AMP that is wrong for BatchNorm, whose
// parameters and running statistics stay f32 (cuDNN and the CPU kernels take 16-bit x with f32
// scale, bias and statistics). cast_for_amp asks autocast::parameter_dtype for each module's own
// parameters and buffers and casts them in place (same TensorImpls, as Module::to: handles taken
// before stay valid). Integer buffers keep their dtype. Call it before wrapping the model in DDP and
// before building MasterWeights (optim/amp.h).
#pragma once
#include <string>

#include "core/dtype.h"
#include "layers/module.h"

namespace tandem {

// The AMP policy's op name for a module's parameters ("batch_norm" for BatchNorm2d and what derives
// from it, "layer_norm", "linear", "conv2d", "embedding"; "elementwise" otherwise).
std::string amp_policy_op(const Module& m);
// Casts `model` for AMP with 16-bit dtype `low` (f16 or bf16).
void cast_for_amp(Module& model, DType low);

}  // namespace tandem
