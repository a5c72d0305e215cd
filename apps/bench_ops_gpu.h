// apps/bench_ops_gpu.h: the GPU half of bench_ops (included only by apps/bench_ops.cpp, CUDA builds).
//
// Baselines call cuBLASLt and cuDNN directly on raw cudaMalloc buffers - no tandem Tensor,
// autograd or dispatch - with the same algorithm-selection logic tandem uses (cuBLASLt heuristic,
// top result; cuDNN heuristic mode A, first plan that finalizes), so the ratio measures tandem's
// own overhead: argument checks, output allocation from the stream-ordered pool, plan-cache
// lookup. Timing: CUDA events around each repetition on the stream the work runs on, after
// warm-up (plans built, pools grown), median over the repetitions.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "core/check.h"

namespace bench {

struct Timing {
  int warmup = 5;
  int reps = 20;
};

// Median milliseconds of `f` (which enqueues work on `s`).
inline double median_ms(cudaStream_t s, const Timing& t, const std::function<void()>& f) {
  for (int i = 0; i < t.warmup; ++i) f();
  std::vector<cudaEvent_t> ev(2 * t.reps);
  for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < t.reps; ++r) {
    CUDA_CHECK(cudaEventRecord(ev[2 * r], s));
    f();
    CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms(t.reps);
  for (int r = 0; r < t.reps; ++r) CUDA_CHECK(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
  for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::nth_element(ms.begin(), ms.begin() + t.reps / 2, ms.end());
  return ms[t.reps / 2];
}

// Device buffer filled with a small finite pattern (0x3c bytes: ~0.01 in f32/bf16, ~1 in f16).
struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    CUDA_CHECK(cudaMemset(p, 0x3c, std::max<size_t>(bytes, 1)));
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// y [M, N] = x [M, K] w[N, K]^T + b: cuBLASLt with the BIAS epilogue, row-major via the transpose
// trick (column-major y^T = w^T... see core/ops/matmul/cuda.cpp). Returns the median ms.
inline double cublaslt_linear_ms(cudaStream_t s, const Timing& t, cudaDataType_t dt, size_t esize, bool tf32,
                                 int64_t M, int64_t N, int64_t K) {
  cublasLtHandle_t h;
  CUBLAS_CHECK(cublasLtCreate(&h));
  Buffer x(M * K * esize), w(N * K * esize), b(N * esize), y(M * N * esize), ws(32u << 20);
  cublasLtMatmulDesc_t desc;
  cublasComputeType_t ct = (dt == CUDA_R_32F && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
  int32_t bt = dt;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b.p, sizeof(b.p)));
  cublasLtMatrixLayout_t la, lb, lc;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, dt, K, N, K));  // w stored [N, K] = col-major [K, N]
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, dt, K, M, K));  // x stored [M, K] = col-major [K, M]
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, dt, N, M, N));  // y stored [M, N] = col-major [N, M]
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = 32u << 20;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &found));
  TANDEM_CHECK(found > 0, "cuBLASLt baseline: no algorithm for linear ", M, "x", K, " -> ", N);
  const float alpha = 1, beta = 0;
  double ms = median_ms(s, t, [&] {
    CUBLAS_CHECK(cublasLtMatmul(h, desc, &alpha, w.p, la, x.p, lb, &beta, y.p, lc, y.p, lc, &res.algo, ws.p, wsb, s));
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
  return ms;
}

// ---- cuDNN conv forward through the graph API, on raw buffers ----
struct DnnDesc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit DnnDesc(cudnnBackendDescriptorType_t t) { CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d)); }
  ~DnnDesc() { cudnnBackendDestroyDescriptor(d); }
  void set(cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t c, const void* v) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d, n, t, c, v));
  }
  void set(cudnnBackendAttributeName_t n, const DnnDesc& v) { set(n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v.d); }
  void finalize() { CUDNN_CHECK(cudnnBackendFinalize(d)); }
};

struct ConvShape {
  int64_t n, h, w, c, o, k, stride, pad;
  int64_t oh() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - k) / stride + 1; }
};

inline void nhwc_tensor(DnnDesc& d, int64_t uid, cudnnDataType_t t, int64_t n, int64_t h, int64_t w, int64_t c) {
  const int64_t dims[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, align = 16;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);  // cudaMalloc: 256-byte aligned
  d.finalize();
}

// Median ms of one conv forward. Returns a negative value if cuDNN offers no engine.
inline double cudnn_conv_ms(cudaStream_t s, const Timing& t, cudnnDataType_t dt, size_t esize, const ConvShape& c) {
  cudnnHandle_t h;
  CUDNN_CHECK(cudnnCreate(&h));
  CUDNN_CHECK(cudnnSetStream(h, s));
  DnnDesc x(CUDNN_BACKEND_TENSOR_DESCRIPTOR), w(CUDNN_BACKEND_TENSOR_DESCRIPTOR), y(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  nhwc_tensor(x, 1, dt, c.n, c.h, c.w, c.c);
  nhwc_tensor(w, 2, dt, c.o, c.k, c.k, c.c);
  nhwc_tensor(y, 3, dt, c.n, c.oh(), c.ow(), c.o);
  DnnDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t two = 2, one[2] = {1, 1}, str[2] = {c.stride, c.stride}, pad[2] = {c.pad, c.pad};
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  conv.finalize();
  DnnDesc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1, beta = 0;
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  op.finalize();
  DnnDesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  graph.finalize();
  DnnDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
  heur.finalize();
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<std::unique_ptr<DnnDesc>> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(std::make_unique<DnnDesc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->d);
  }
  if (count > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                         &count, raw.data()));
  double ms = -1;
  for (int64_t i = 0; i < count && ms < 0; ++i) {
    DnnDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[i]);
    if (cudnnBackendFinalize(plan.d) != CUDNN_STATUS_SUCCESS) continue;
    int64_t wsb = 0, got = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &wsb));
    Buffer bx(c.n * c.h * c.w * c.c * esize), bw(c.o * c.k * c.k * c.c * esize), by(c.n * c.oh() * c.ow() * c.o * esize),
        bws(static_cast<size_t>(wsb));
    void* ptrs[3] = {bx.p, bw.p, by.p};
    const int64_t uids[3] = {1, 2, 3};
    DnnDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &bws.p);
    pack.finalize();
    ms = median_ms(s, t, [&] { CUDNN_CHECK(cudnnBackendExecute(h, plan.d, pack.d)); });
  }
  cudnnDestroy(h);
  return ms;
}

}  // namespace bench
