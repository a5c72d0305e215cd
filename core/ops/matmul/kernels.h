// core/ops/matmul/kernels.h: backend entry points for row-major GEMM (internal).
//
// One call computes, for every batch entry b,
//     C[b] = op(A[b]) @ op(B[b])          op(X) = X or X^T (GemmArgs::trans_a / trans_b)
// with C [m, n], op(A) [m, k], op(B) [k, n], all row-major and densely packed (the leading
// dimension is the stored row length). Batch entries sit stride_* elements apart; a stride of 0
// broadcasts that operand. The op layer (core/ops/matmul/matmul.cpp) checks shapes, dtypes and devices.
//
// An optional epilogue can be fused where the backend supports it:
//   Bias:      C[b][i, j] += bias[j]                 (linear forward; batch must be 1)
//   BiasGradA: aux[i] = sum_k op(A)[i, k]            (linear backward: db = column sums of dy,
//                                                     computed while dW = dy^T x reads dy)
// The functions return true when the epilogue was applied and false when the backend could not
// fuse it; the caller then computes it separately. The CPU backend fuses Bias (it pre-fills C and
// runs GEMM with beta = 1) but never BiasGradA (the generic reduction is as fast as a fused loop).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem::kernels {

enum class GemmEpilogue { None, Bias, BiasGradA };

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between consecutive batch entries
  GemmEpilogue epilogue = GemmEpilogue::None;
};

// `aux` is the bias [n] for Bias, the output [m] for BiasGradA, ignored for None.
bool gemm_cpu(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux);
// Whether gemm_cpu runs this f32 GEMM on oneDNN's dnnl_sgemm now rather than OpenBLAS (the rule in
// core/ops/matmul/cpu.cpp: built with oneDNN, BackendConfig::cpu_onednn and cpu_onednn_sgemm on, 1 thread, not a tiny
// GEMM). For the parity test, which must know that the path it compares was taken.
bool cpu_sgemm_uses_onednn(const GemmArgs& g);
#ifdef TANDEM_WITH_CUDA
bool gemm_cuda(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux);
#endif

}  // namespace tandem::kernels
