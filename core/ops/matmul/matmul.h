// core/ops/matmul/matmul.h: matrix products (OpenBLAS or oneDNN on CPU, cuBLASLt on CUDA).
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
// The gradients of y2 = x2 w^T (+ b) for a given dy2 [M, out] (x2 [M, in]; no autograd), each
// only where asked: dx [M, in] = dy w, dw [out, in] = dy^T x, and db [out] = the column sums of dy,
// fused into dw's GEMM as cuBLASLt's BGRADB epilogue where the backend can (else a separate column
// sum; the CPU always sums separately). linear's own backward, and the GEMM tails of
// core/ops/fused_bias/ whose bias enters after a bias-free GEMM (linear_bias_gelu, ...): their bias
// gradient is the column sum of the GEMM output's gradient, so it rides on the same epilogue.
struct LinearGrads {
  Tensor dx, dw, db;
};
LinearGrads linear_grads(const Tensor& dy2, const Tensor& x2, const Tensor& w, bool want_dx, bool want_dw,
                         bool want_db);
// How many CUDA GEMMs asked for a fused epilogue and got it (fused) or ran it as a separate pass
// (cuBLASLt offered no kernel with it): BIAS is linear's forward bias add, BGRADB the bias gradient
// in dw's GEMM (linear_grads). For tests (a silent fallback fails them) and the GPU session's table.
struct GemmEpilogueStats {
  int64_t bias_fused = 0, bias_separate = 0;
  int64_t bgradb_fused = 0, bgradb_separate = 0;
};
GemmEpilogueStats gemm_epilogue_stats();

// a [m, k] @ b [k, n] -> [m, n]; or batched a [B, m, k] @ b [B, k, n] -> [B, m, n].
// trans_a / trans_b treat the operand's last two dims as transposed (no copy is made).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace tandem::ops
