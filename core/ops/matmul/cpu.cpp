// core/ops/matmul/cpu.cpp: row-major GEMM on OpenBLAS (cblas_sgemm / cblas_dgemm).
//
// A batched call is a loop of single GEMMs: OpenBLAS threads inside each call, and the batched
// shapes tandem runs on the CPU (attention heads of a small encoder) are big enough per entry.
// The Bias epilogue pre-fills each row of C with the bias and runs GEMM with beta = 1, so the bias
// costs one pass over C that the GEMM would have made anyway. BiasGradA is not fused here (see
// core/ops/matmul/kernels.h).
#include <cblas.h>

#include <algorithm>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/matmul/kernels.h"

namespace tandem::kernels {
namespace {

inline void gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const float* a,
                  blasint lda, const float* b, blasint ldb, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
}
inline void gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const double* a,
                  blasint lda, const double* b, blasint ldb, double beta, double* c) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, n);
}

template <typename T>
void run(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& bias) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  // Leading dimension = stored row length: op(A) is [m, k], so A is stored [m, k] or [k, m].
  blasint lda = static_cast<blasint>(g.trans_a ? g.m : g.k);
  blasint ldb = static_cast<blasint>(g.trans_b ? g.k : g.n);
  CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  bool with_bias = g.epilogue == GemmEpilogue::Bias;
  const T* pbias = with_bias ? bias.data<T>() : nullptr;
  for (int64_t i = 0; i < g.batch; ++i) {
    T* ci = pc + i * g.stride_c;
    if (with_bias)
      for (int64_t r = 0; r < g.m; ++r) std::copy(pbias, pbias + g.n, ci + r * g.n);
    if (g.k == 0) {  // empty reduction: C is the bias or zero; BLAS would leave C untouched
      if (!with_bias) std::fill(ci, ci + g.m * g.n, T(0));
      continue;
    }
    gemm1(ta, tb, static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k),
          pa + i * g.stride_a, lda, pb + i * g.stride_b, ldb, with_bias ? T(1) : T(0), ci);
  }
}

}  // namespace

bool gemm_cpu(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux) {
  TANDEM_CPU_WIDEN_16BIT(gemm_cpu, g, a, b, c, aux);
  if (g.m == 0 || g.n == 0) return g.epilogue != GemmEpilogue::BiasGradA;
  TANDEM_CPU_FLOAT_TYPES(a.dtype(), T, [&] { run<T>(g, a, b, c, aux); });
  return g.epilogue != GemmEpilogue::BiasGradA;
}

}  // namespace tandem::kernels
