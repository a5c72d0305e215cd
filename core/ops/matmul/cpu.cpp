// core/ops/matmul/cpu.cpp: row-major GEMM on OpenBLAS (cblas_sgemm / cblas_dgemm), or on oneDNN's
// dnnl_sgemm for f32 where that was measured faster (below).
//
// A batched call is a loop of single GEMMs: OpenBLAS threads inside each call, and the batched
// shapes tandem runs on the CPU (attention heads of a small encoder) are big enough per entry.
// The Bias epilogue pre-fills each row of C with the bias and runs GEMM with beta = 1, so the bias
// costs one pass over C that the GEMM would have made anyway. BiasGradA is not fused here (see
// core/ops/matmul/kernels.h).
// Library choice, f32 only (f64, the gradient checks' reference, always runs OpenBLAS): oneDNN's
// dnnl_sgemm (row-major, the same A/B/C/ld/beta contract) when the build has oneDNN,
// BackendConfig::cpu_onednn and cpu_onednn_sgemm are on (the second OFF by default: under load
// train_encoder's heap was corrupted in 5 of 50 runs with it, 0 of 50 without - core/backend.h), both thread pools are 1 thread and the call has at least
// kOnednnMinMacs multiply-adds (below); OpenBLAS otherwise. Measured
// (apps/bench_ops's CPU GEMM rows, apps/results/2026-11-28-cpu-2core/gemm/; this CPU's OpenBLAS
// runs its AVX-512 Cooperlake kernels, oneDNN its AVX-512 JIT ones):
//   1 thread (process CPU time, interleaved medians): dnnl_sgemm took 925 ms of bert_small's step
//     GEMMs against OpenBLAS's 1,007 (1.09x), faster on 23 of its 24 shapes (5 % slower on FFN1's
//     weight gradient); VGG-16's classifier 1.21x, ResNet-18's FC 1.13x (2 of 3 shapes faster).
//   2 threads: no win. Interleaved, every OpenBLAS call that followed an OpenMP region ran 2-10x
//     slower (OpenMP's workers spin-wait on the cores OpenBLAS's pthreads need), and with OpenMP's
//     workers passive OpenBLAS led on bert_small (800 ms against 846). Mixing the two pools within
//     one step is the cost, so at 2+ threads the GEMMs stay on one library, OpenBLAS.
//   The matmul primitive (cached, tandem's strided layouts) gained less than dnnl_sgemm on
//     bert_small at 1 thread (1.04x), and packing B in oneDNN's layout (its ceiling, the reorder
//     not timed) no more (1.03x), so the plain entry point is used: no primitive cache needed.
//   Small GEMMs stay on OpenBLAS: under 2^22 multiply-adds a call takes under 0.1 ms at 1 thread,
//     so the library choice is worth microseconds, while it changes the f32 bits (another summation
//     order). With every GEMM routed, the main job (resnet_tiny's 32 x 128 -> 10 classifier: 41 K
//     multiply-adds) diverged from step 50 and ended at 77.80 % top-1 instead of 81.00 % (the noise
//     of bit-level changes on its 500 validation images); with the floor its log is main's, line for
//     line. Every bert_small, VGG-16 and ResNet-18 GEMM above has >= 16 M multiply-adds.
// dnnl_sgemm runs on OpenMP's pool of the calling thread (core/threads.h sets it with OpenBLAS's).
#include <cblas.h>

#include <algorithm>
#include <type_traits>

#include "core/backend.h"
#include "core/check.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/matmul/kernels.h"

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

namespace tandem::kernels {
namespace {

// The rule above's floor: batch x m x n x k of one call (see the file's contract).
constexpr int64_t kOnednnMinMacs = int64_t{1} << 22;

// The rule above: does this f32 GEMM call run on oneDNN?
bool sgemm_on_onednn(const GemmArgs& g) {
#if TANDEM_HAVE_ONEDNN
  return backend().cpu_onednn && backend().cpu_onednn_sgemm && g.batch * g.m * g.n * g.k >= kOnednnMinMacs &&
         omp_get_max_threads() == 1 &&
         openblas_get_num_threads() == 1;
#else
  return false;
#endif
}

inline void gemm1(bool onednn, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
                  const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c) {
#if TANDEM_HAVE_ONEDNN
  if (onednn) {
    const dnnl_status_t st = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, 1.0f,
                                        a, lda, b, ldb, beta, c, n);
    TANDEM_CHECK(st == dnnl_success, "matmul (CPU): oneDNN's dnnl_sgemm failed (status ", static_cast<int>(st),
                 ") on m=", m, " n=", n, " k=", k, "; BackendConfig::cpu_onednn = false runs OpenBLAS instead");
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
}
inline void gemm1(bool, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const double* a,
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
  const bool onednn = std::is_same_v<T, float> && sgemm_on_onednn(g);  // f64: always OpenBLAS
  for (int64_t i = 0; i < g.batch; ++i) {
    T* ci = pc + i * g.stride_c;
    if (with_bias)
      for (int64_t r = 0; r < g.m; ++r) std::copy(pbias, pbias + g.n, ci + r * g.n);
    if (g.k == 0) {  // empty reduction: C is the bias or zero; BLAS would leave C untouched
      if (!with_bias) std::fill(ci, ci + g.m * g.n, T(0));
      continue;
    }
    gemm1(onednn, ta, tb, static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k),
          pa + i * g.stride_a, lda, pb + i * g.stride_b, ldb, with_bias ? T(1) : T(0), ci);
  }
}

}  // namespace

bool cpu_sgemm_uses_onednn(const GemmArgs& g) { return sgemm_on_onednn(g); }

bool gemm_cpu(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux) {
  TANDEM_CPU_WIDEN_16BIT(gemm_cpu, g, a, b, c, aux);
  if (g.m == 0 || g.n == 0) return g.epilogue != GemmEpilogue::BiasGradA;
  TANDEM_CPU_FLOAT_TYPES(a.dtype(), T, [&] { run<T>(g, a, b, c, aux); });
  return g.epilogue != GemmEpilogue::BiasGradA;
}

}  // namespace tandem::kernels
