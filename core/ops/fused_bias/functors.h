// core/ops/fused_bias/functors.h: the math of bias_gelu, bias_dropout_add and conv's bias + ReLU, shared by the CPU
// loops (core/ops/fused_bias/cpu.cpp) and the CUDA kernels (core/ops/fused_bias/cuda.cu).
//
// Built from the existing functors, so the fused ops cannot drift from the unfused ones: GELU and
// its derivative are fn::Gelu / fn::GeluBackward (erf form), ReLU is fn::Relu / fn::ReluBackward,
// the dropout rule is fn::Dropout.
// T is float (16-bit tensors are widened first) or double (CPU gradient checks).
#pragma once
#include <cstdint>

#include "core/ops/dropout/functors.h"
#include "core/ops/elementwise/functors.h"

namespace tandem::fn {

// v kept and scaled by 1 / (1 - p), or zeroed, by the dropout rule; p == 0 keeps everything
// without hashing (eval mode, or a model built with dropout 0).
struct MaybeDropout {
  float p;
  uint64_t seed, offset;
  template <typename T> TANDEM_HD T operator()(T v, uint64_t i) const {
    return p == 0.0f ? v : Dropout{p, seed, offset}(v, i);
  }
};

// relu(x + b): conv2d_bias_relu's epilogue when cuDNN's graph does not take it (core/ops/conv/conv.h).
struct BiasRelu {
  template <typename T> TANDEM_HD T operator()(T x, T b) const { return Relu{}(x + b); }
};
struct BiasGelu {
  template <typename T> TANDEM_HD T operator()(T x, T b) const { return Gelu{}(x + b); }
};
// d/dx gelu(x + b) times dy; the same value is d/db.
struct BiasGeluBackward {
  template <typename T> TANDEM_HD T operator()(T dy, T x, T b) const { return GeluBackward{}(dy, x + b); }
};
// residual + dropout(x + b) for element i of the tensor
struct BiasDropoutAdd {
  MaybeDropout drop;
  template <typename T> TANDEM_HD T operator()(T x, T b, T r, uint64_t i) const { return r + drop(x + b, i); }
};

}  // namespace tandem::fn
