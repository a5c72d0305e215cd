// core/ops/matmul/cuda.cpp: row-major GEMM on cuBLASLt, with the algorithm choice cached per shape.
//
// Row-major via the transpose trick. cuBLASLt is column-major, and a row-major [r, c] matrix has
// the same bytes as a column-major [c, r] matrix (its transpose). So instead of the row-major
//     C [m, n] = op(A) [m, k] @ op(B) [k, n]
// we ask cuBLASLt for the column-major product of the transposes, which has the same bytes:
//     C^T [n, m] = op(B)^T [n, k] @ op(A)^T [k, m]
// i.e. cuBLASLt's "A" is our B, its "B" is our A, its m/n are our n/m, and each operand keeps its
// own transpose flag (a stored row-major B [k, n] already *is* the column-major op(B)^T [n, k]).
// In that picture the epilogues map as:
//   BIAS   adds a vector along the rows of C^T (length n): our per-column bias[n]      (linear y)
//   BGRADB sums cuBLASLt's B = our op(A) over k:        aux[i] = sum_k op(A)[i, k]     (linear db)
//
// Precision: f32 uses CUBLAS_COMPUTE_32F_FAST_TF32 when BackendConfig::allow_tf32 (tensor cores, 10-bit
// mantissa inputs, f32 accumulation), else plain CUBLAS_COMPUTE_32F. bf16/f16 use tensor cores
// with CUBLAS_COMPUTE_32F (f32 accumulation), outputs rounded once to the storage type.
//
// Caching: building descriptors and running cublasLtMatmulAlgoGetHeuristic costs tens of
// microseconds, as much as a small GEMM, so every distinct (device, dtype, precision, shape,
// transposes, batch strides, epilogue, pointer alignments) gets one Plan, built once. Pointer
// alignment is part of the key because the heuristic may pick kernels that need 16-byte aligned
// operands; a leading-dim slice of a tensor can be less aligned than a fresh allocation.
// If the heuristic offers no kernel for a fused epilogue, the Plan is built without it and
// gemm_cuda returns false so the caller runs the bias / bias-gradient separately.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <mutex>

#include "core/backend.h"
#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/common/cuda/blas_handle.h"
#include "core/ops/matmul/kernels.h"
#include "core/ops/matmul/matmul.h"

namespace tandem::kernels {
namespace {

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
  cublasLtMatmulAlgo_t algo{};
  bool fused = false;  // the requested epilogue is part of desc
};

using Key = std::array<int64_t, 17>;
std::map<Key, Plan> g_plans;  // never shrinks: one entry per distinct GEMM of the model (tens)
std::mutex g_mutex;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: TANDEM_THROW("CUDA matmul takes f32, f16 or bf16, got ", dtype_name(t), ": cast the operands first");
  }
}

// Largest power of two (<= 16) dividing the address: 16 is the most any cuBLASLt kernel asks for.
int64_t alignment(const void* p) {
  auto u = reinterpret_cast<uintptr_t>(p);
  int64_t a = 16;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, rows));  // column-major, packed: ld = rows
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// Builds descriptors and asks the heuristic for its best algorithm; false if it has none.
bool try_build(const GemmArgs& g, DType dt, bool tf32, const int64_t align[4], bool with_epilogue, const void* aux,
               Plan& p) {
  cudaDataType_t t = cuda_type(dt);
  cublasComputeType_t compute = (dt == DType::F32 && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (with_epilogue) {
    cublasLtEpilogue_t ep = g.epilogue == GemmEpilogue::Bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    int32_t bias_type = t;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    // The heuristic reads the pointer's value to learn its alignment (it never dereferences it).
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aux, sizeof(aux)));
  }
  // Stored shapes in column-major terms (rows, cols) before each operand's op is applied.
  p.a = g.trans_b ? layout(t, g.k, g.n, g.batch, g.stride_b) : layout(t, g.n, g.k, g.batch, g.stride_b);
  p.b = g.trans_a ? layout(t, g.m, g.k, g.batch, g.stride_a) : layout(t, g.k, g.m, g.batch, g.stride_a);
  p.c = layout(t, g.n, g.m, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = cuda::kBlasWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const int64_t al[4] = {align[1], align[0], align[2], align[2]};  // cuBLASLt's A/B are our B/A
  for (int i = 0; i < 4; ++i) {
    uint32_t v = static_cast<uint32_t>(al[i]);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &v, sizeof(v)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cuda::blaslt_handle(), p.desc, p.a, p.b, p.c, p.c, pref, 1,
                                                     &result, &found);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.fused = with_epilogue;
    return true;
  }
  // With an epilogue, any failure means "not fusable here" (cuBLASLt reports unsupported epilogue
  // combinations as NOT_SUPPORTED or INVALID_VALUE depending on version): the caller retries
  // without it. Without one, only "no kernel" (NOT_SUPPORTED / zero results) is tolerated here.
  TANDEM_CHECK(with_epilogue || st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED,
               "cublasLtMatmulAlgoGetHeuristic failed: ", cublasGetStatusName(st));
  for (auto* l : {&p.a, &p.b, &p.c}) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(*l));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
  p = Plan{};
  return false;
}

}  // namespace

bool gemm_cuda(const GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux) {
  const bool want = g.epilogue != GemmEpilogue::None;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return !want;
  cudaStream_t stream = cuda::compute_stream();
  if (g.k == 0) {  // empty reduction: C = 0; cuBLASLt rejects k = 0, and the epilogue is left to the caller
    CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream));
    return !want;
  }
  const bool tf32 = backend().allow_tf32;
  const int64_t align[4] = {alignment(a.data_ptr()), alignment(b.data_ptr()), alignment(c.data_ptr()),
                            want ? alignment(aux.data_ptr()) : 16};
  Key key{cuda::current_device(), static_cast<int64_t>(a.dtype()), tf32, g.trans_a, g.trans_b, g.m, g.n, g.k, g.batch,
          g.stride_a, g.stride_b, g.stride_c, static_cast<int64_t>(g.epilogue), align[0], align[1], align[2], align[3]};

  std::lock_guard<std::mutex> lock(g_mutex);  // also guards the per-call BIAS_POINTER write below
  auto it = g_plans.find(key);
  if (it == g_plans.end()) {
    Plan p;
    const void* aux_ptr = want ? aux.data_ptr() : nullptr;
    if (!(want && try_build(g, a.dtype(), tf32, align, true, aux_ptr, p)))
      TANDEM_CHECK(try_build(g, a.dtype(), tf32, align, false, nullptr, p), "cuBLASLt has no algorithm for a ",
                   dtype_name(a.dtype()), " GEMM m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch,
                   ": check that the operands are f32/bf16/f16 and report this shape");
    it = g_plans.emplace(key, p).first;
  }
  Plan& p = it->second;
  if (p.fused) {
    const void* aux_ptr = aux.data_ptr();
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aux_ptr, sizeof(aux_ptr)));
  }
  const float alpha = 1.0f, beta = 0.0f;  // scale type is f32 for every dtype (CUDA_R_32F above)
  CUBLAS_CHECK(cublasLtMatmul(cuda::blaslt_handle(), p.desc, &alpha, b.data_ptr(), p.a, a.data_ptr(), p.b, &beta,
                              c.data_ptr(), p.c, c.data_ptr(), p.c, &p.algo, cuda::blas_workspace(),
                              cuda::kBlasWorkspaceBytes, stream),
               "GEMM m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch, " (", dtype_name(a.dtype()), ")");
  return p.fused || !want;
}

}  // namespace tandem::kernels
