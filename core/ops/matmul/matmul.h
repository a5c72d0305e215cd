// core/ops/matmul/matmul.h: matrix products (OpenBLAS on CPU, cuBLASLt on CUDA).
//
// Layouts follow PyTorch: a linear weight is [out_features, in_features] and y = x w^T + b.
// f32 on CUDA may use TF32 tensor cores when BackendConfig::allow_tf32 is on (core/backend.h; the
// default, as in PyTorch's cudnn.allow_tf32 for convs; matmul TF32 is on here because these models
// train fine with it);
// f16/bf16 always use tensor cores with f32 accumulation.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

// x [..., in], w [out, in], b [out] or undefined -> [..., out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// a [m, k] @ b [k, n] -> [m, n]; or batched a [B, m, k] @ b [B, k, n] -> [B, m, n].
// trans_a / trans_b treat the operand's last two dims as transposed (no copy is made).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace tandem::ops
