// core/ops/elementwise/cuda.cu: CUDA kernels over the shared functors (core/ops/elementwise/functors.h).
// Loads widen to float, the functor runs in float, stores narrow to the tensor's dtype.
//
// The maps are bandwidth-bound, so they move 16 bytes per thread per access (4 f32 or 8 f16/bf16
// elements: one LDG.128/STG.128) when every pointer is 16-byte aligned and, for a broadcast b,
// b's length is a multiple of the vector width (then a vector of a never straddles the end of b).
// Tensors from the allocator are 256-byte aligned; views at odd offsets take the scalar kernel.
// Both are grid-stride loops over a grid capped by cuda::grid_for, so any size is covered.
// The < 16-byte tail of a vectorised map is done by the first threads of the same launch.
//
// sum_leading (the bias gradient of conv and of linear layers whose GEMM had no fused epilogue)
// is a 2-D column reduction: partials per row chunk, then an ordered finish (column_reduce.cuh).
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/column_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/elementwise/visit.h"
#include "core/ops/elementwise/functors.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

using cuda::grid_stride;
using cuda::kVec;
using cuda::thread_index;
using cuda::Vec;

template <typename T, typename F>
__global__ void map1_kernel(const T* x, T* y, long long n, F f) {
  for (long long i = thread_index(); i < n; i += grid_stride()) y[i] = from_float<T>(f(to_float(x[i])));
}

// n = nv * kVec + tail; the tail (< kVec elements) goes to the first threads.
template <typename T, typename F>
__global__ void map1_vec_kernel(const T* x, T* y, long long n, long long nv, F f) {
  const Vec<T>* xv = reinterpret_cast<const Vec<T>*>(x);
  Vec<T>* yv = reinterpret_cast<Vec<T>*>(y);
  for (long long i = thread_index(); i < nv; i += grid_stride()) {
    Vec<T> a = xv[i];
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) a.v[k] = from_float<T>(f(to_float(a.v[k])));
    yv[i] = a;
  }
  long long j = nv * kVec<T> + thread_index();
  if (j < n) y[j] = from_float<T>(f(to_float(x[j])));
}

template <typename T, typename F>
__global__ void map2_kernel(const T* a, const T* b, T* y, long long n, long long nb, F f) {
  for (long long i = thread_index(); i < n; i += grid_stride())
    y[i] = from_float<T>(f(to_float(a[i]), to_float(b[nb == n ? i : i % nb])));
}

// As map1_vec_kernel; b has nb elements, nb == n or nb a multiple of kVec (so nbv = nb / kVec).
template <typename T, typename F>
__global__ void map2_vec_kernel(const T* a, const T* b, T* y, long long n, long long nb, long long nv, F f) {
  const Vec<T>* av = reinterpret_cast<const Vec<T>*>(a);
  const Vec<T>* bv = reinterpret_cast<const Vec<T>*>(b);
  Vec<T>* yv = reinterpret_cast<Vec<T>*>(y);
  const long long nbv = nb / kVec<T>;
  for (long long i = thread_index(); i < nv; i += grid_stride()) {
    Vec<T> u = av[i];
    const Vec<T> w = bv[nb == n ? i : i % nbv];
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) u.v[k] = from_float<T>(f(to_float(u.v[k]), to_float(w.v[k])));
    yv[i] = u;
  }
  long long j = nv * kVec<T> + thread_index();
  if (j < n) y[j] = from_float<T>(f(to_float(a[j]), to_float(b[nb == n ? j : j % nb])));
}

template <typename T, typename F>
void map1(const Tensor& x, Tensor& y, F f) {
  long long n = x.numel();
  if (n == 0) return;
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  cudaStream_t s = cuda::compute_stream();
  if (cuda::vector_path_ok({xp, yp}, sizeof(T))) {
    long long nv = n / kVec<T>;
    map1_vec_kernel<<<cuda::grid_for(nv), 256, 0, s>>>(xp, yp, n, nv, f);
  } else {
    map1_kernel<<<cuda::grid_for(n), 256, 0, s>>>(xp, yp, n, f);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T, typename F>
void map2(const Tensor& a, const Tensor& b, Tensor& y, F f) {
  long long n = a.numel(), nb = b.numel();
  if (n == 0) return;
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  cudaStream_t s = cuda::compute_stream();
  if (cuda::vector_path_ok({ap, bp, yp}, sizeof(T), nb == n ? 0 : nb)) {
    long long nv = n / kVec<T>;
    map2_vec_kernel<<<cuda::grid_for(nv), 256, 0, s>>>(ap, bp, yp, n, nb, nv, f);
  } else {
    map2_kernel<<<cuda::grid_for(n), 256, 0, s>>>(ap, bp, yp, n, nb, f);
  }
  CUDA_CHECK_LAUNCH();
}

// Column sums of src [m, n] over row chunk blockIdx.y, written as out[blockIdx.y, :] in O
// (f32 partials, or the final dtype directly when there is a single chunk).
template <typename T, typename O>
__global__ void column_partial_kernel(const T* src, long long m, long long n, long long rows_per_chunk, O* out) {
  long long c = blockIdx.x * (long long)cuda::kColTx + threadIdx.x;
  long long r0 = blockIdx.y * rows_per_chunk, r1 = min(m, r0 + rows_per_chunk);
  float acc = 0.f;
  if (c < n)
    for (long long r = r0 + threadIdx.y; r < r1; r += cuda::kColTy) acc += to_float(src[r * n + c]);
  cuda::column_sum<cuda::kColTx, cuda::kColTy>(acc);
  if (threadIdx.y == 0 && c < n) out[blockIdx.y * n + c] = from_float<O>(acc);
}

}  // namespace

void unary_cuda(Unary op, const Tensor& x, Tensor& y, float alpha) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] { visit_unary(op, alpha, [&](auto f) { map1<T>(x, y, f); }); });
}

void binary_cuda(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta) {
  TANDEM_CUDA_FLOAT_TYPES(a.dtype(), T, [&] { visit_binary(op, alpha, beta, [&](auto f) { map2<T>(a, b, y, f); }); });
}

void sum_leading_cuda(const Tensor& src, Tensor& dst) {
  TANDEM_CUDA_FLOAT_TYPES(src.dtype(), T, [&] {
    long long m = src.size(0), n = src.size(1);
    if (n == 0) return;
    cudaStream_t s = cuda::compute_stream();
    cuda::ColumnChunks ch = cuda::plan_column_chunks(m, n);
    dim3 grid(static_cast<unsigned>((n + cuda::kColTx - 1) / cuda::kColTx), static_cast<unsigned>(ch.count));
    dim3 block(cuda::kColTx, cuda::kColTy);
    const T* sp = static_cast<const T*>(src.data_ptr());
    T* dp = static_cast<T*>(dst.data_ptr());
    if (ch.count == 1) {  // one chunk: its partial is the answer
      column_partial_kernel<T, T><<<grid, block, 0, s>>>(sp, m, n, ch.rows_per_chunk, dp);
      CUDA_CHECK_LAUNCH("bias gradient (column sum)");
      return;
    }
    Tensor partial = Tensor::empty({ch.count, n}, DType::F32, src.device());
    column_partial_kernel<T, float><<<grid, block, 0, s>>>(sp, m, n, ch.rows_per_chunk, partial.data<float>());
    CUDA_CHECK_LAUNCH("bias gradient (column partial sums)");
    cuda::column_finish_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(partial.data<float>(), ch.count, n,
                                                                                   dp);
    CUDA_CHECK_LAUNCH("bias gradient (column finish)");
  });
}

}  // namespace tandem::kernels
