// core/ops/fused_bias/cuda.cu: CUDA bias_gelu, bias_dropout_add and the bias + ReLU tails over the shared functors
// (core/ops/fused_bias/functors.h). Loads widen to float, the math runs in float, stores narrow.
//
// Forward: a grid-stride map that moves 16 bytes per access (4 f32 or 8 f16/bf16 elements) when
// x, residual and y are 16-byte aligned and C is a multiple of the vector width, so a vector never
// straddles a row end and reads one aligned vector of the bias; otherwise a scalar grid-stride
// loop. As in elementwise.cu, the < 16-byte tail goes to the first threads of the same launch.
// Backward: dx and the bias gradient in one pass, laid out as the bias-gradient column reduction
// (column_reduce.cuh): block (kColTx columns, kColTy row lanes) over a chunk of rows; each thread
// writes dx for its column and keeps a float running sum; per-chunk partials are then added in
// chunk order (deterministic, no atomics). The dropout mask is recomputed from (seed, offset + i)
// in both directions, so it matches the CPU and ops::dropout bit for bit. Every map has bound(), run
// once per thread before its loop: inside a captured graph the dropout maps read their seed and
// base offset from the generator's device slot there (fn::with_slot); the others return themselves.
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/column_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/fused_bias/functors.h"
#include "core/ops/fused_bias/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

// The forward maps, as one call shape: y[i] = f(x[i], b[c], r[i], i). bias_gelu has no residual
// (r == nullptr is never read).
struct GeluMap {
  __device__ GeluMap bound() const { return *this; }
  __device__ float operator()(float x, float b, float, uint64_t) const { return fn::BiasGelu{}(x, b); }
};
struct DropoutAddMap {
  fn::BiasDropoutAdd f;
  const uint64_t* slot;  // null outside a graph capture
  __device__ DropoutAddMap bound() const { return {{fn::with_slot(f.drop, slot)}, nullptr}; }
  __device__ float operator()(float x, float b, float r, uint64_t i) const { return f(x, b, r, i); }
};

struct ReluMap {
  __device__ ReluMap bound() const { return *this; }
  __device__ float operator()(float x, float b, float, uint64_t) const { return fn::BiasRelu{}(x, b); }
};

template <typename T>
__device__ __forceinline__ float load_or_zero(const T* p, long long i) {
  return p ? to_float(p[i]) : 0.f;
}

template <typename T, typename F>
__global__ void bias_map_kernel(const T* x, const T* b, const T* r, T* y, long long n, long long C, F f0) {
  const F f = f0.bound();
  for (long long i = cuda::thread_index(); i < n; i += cuda::grid_stride())
    y[i] = from_float<T>(f(to_float(x[i]), to_float(b[i % C]), load_or_zero(r, i), static_cast<uint64_t>(i)));
}

// n = nv * kVec + tail; C % kVec == 0, so vector i uses bias vector i % (C / kVec).
template <typename T, typename F>
__global__ void bias_map_vec_kernel(const T* x, const T* b, const T* r, T* y, long long n, long long C, long long nv,
                                    F f0) {
  const F f = f0.bound();
  const cuda::Vec<T>* xv = reinterpret_cast<const cuda::Vec<T>*>(x);
  const cuda::Vec<T>* bv = reinterpret_cast<const cuda::Vec<T>*>(b);
  const cuda::Vec<T>* rv = reinterpret_cast<const cuda::Vec<T>*>(r);
  cuda::Vec<T>* yv = reinterpret_cast<cuda::Vec<T>*>(y);
  // The bias vector index i % cv, stepped along with i instead of a 64-bit modulo per vector
  // (the dropout hash already keeps the integer units busy).
  const long long cv = C / cuda::kVec<T>, step = cuda::grid_stride() % cv;
  long long c = cuda::thread_index() % cv;
  for (long long i = cuda::thread_index(); i < nv; i += cuda::grid_stride()) {
    cuda::Vec<T> a = xv[i];
    const cuda::Vec<T> w = bv[c];
    c = c + step >= cv ? c + step - cv : c + step;
    cuda::Vec<T> res;
    if (r) res = rv[i];
#pragma unroll
    for (int k = 0; k < cuda::kVec<T>; ++k)
      a.v[k] = from_float<T>(f(to_float(a.v[k]), to_float(w.v[k]), r ? to_float(res.v[k]) : 0.f,
                               static_cast<uint64_t>(i * cuda::kVec<T> + k)));
    yv[i] = a;
  }
  long long j = nv * cuda::kVec<T> + cuda::thread_index();
  if (j < n) y[j] = from_float<T>(f(to_float(x[j]), to_float(b[j % C]), load_or_zero(r, j), static_cast<uint64_t>(j)));
}

template <typename T, typename F>
void bias_map(const Tensor& x, const Tensor& bias, const Tensor* residual, Tensor& y, F f) {
  const long long n = x.numel(), C = bias.numel();
  if (n == 0) return;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* bp = static_cast<const T*>(bias.data_ptr());
  const T* rp = residual ? static_cast<const T*>(residual->data_ptr()) : nullptr;
  T* yp = static_cast<T*>(y.data_ptr());
  cudaStream_t s = cuda::compute_stream();
  if (cuda::vector_path_ok({xp, bp, rp, yp}, sizeof(T), C)) {
    const long long nv = n / cuda::kVec<T>;
    bias_map_vec_kernel<<<cuda::grid_for(nv), 256, 0, s>>>(xp, bp, rp, yp, n, C, nv, f);
  } else {
    bias_map_kernel<<<cuda::grid_for(n), 256, 0, s>>>(xp, bp, rp, yp, n, C, f);
  }
  CUDA_CHECK_LAUNCH();
}

// The backward maps: dx[i] = g(i, c) for element i in column c.
template <typename T>
struct GeluGrad {
  const T *dy, *x, *b;
  __device__ GeluGrad bound() const { return *this; }
  __device__ float operator()(long long i, long long c) const {
    return fn::BiasGeluBackward{}(to_float(dy[i]), to_float(x[i]), to_float(b[c]));
  }
};
template <typename T>
struct DropoutGrad {
  const T* dy;
  fn::MaybeDropout drop;
  const uint64_t* slot;  // null outside a graph capture
  __device__ DropoutGrad bound() const { return {dy, fn::with_slot(drop, slot), nullptr}; }
  __device__ float operator()(long long i, long long) const { return drop(to_float(dy[i]), static_cast<uint64_t>(i)); }
};

template <typename T>
struct ReluGrad {
  const T *dy, *y;
  __device__ ReluGrad bound() const { return *this; }
  __device__ float operator()(long long i, long long) const { return fn::ReluBackward{}(to_float(dy[i]), to_float(y[i])); }
};

// dx over the rows of chunk blockIdx.y; when `out` is set, the column sums of this chunk go to
// out[blockIdx.y, :] (f32 partials, or the final dtype directly when there is one chunk). `out`
// is uniform over the launch, so every thread of a block reaches column_sum's barrier or none.
template <typename T, typename O, typename G>
__global__ void map_column_sum_kernel(T* dx, long long m, long long C, long long rows_per_chunk, O* out, G g0) {
  const G g = g0.bound();
  const long long c = blockIdx.x * (long long)cuda::kColTx + threadIdx.x;
  const long long r0 = blockIdx.y * rows_per_chunk, r1 = min(m, r0 + rows_per_chunk);
  float acc = 0.f;
  if (c < C)
    for (long long r = r0 + threadIdx.y; r < r1; r += cuda::kColTy) {
      const float v = g(r * C + c, c);
      dx[r * C + c] = from_float<T>(v);
      acc += v;
    }
  if (out == nullptr) return;
  cuda::column_sum<cuda::kColTx, cuda::kColTy>(acc);
  if (threadIdx.y == 0 && c < C) out[blockIdx.y * C + c] = from_float<O>(acc);
}

// dx only (no bias gradient: the composite GEMM tails take it from the dw GEMM's BGRADB epilogue,
// fused_bias.h): a plain grid-stride map, coalesced along the flat index, no column layout.
template <typename T, typename G>
__global__ void map_kernel(T* dx, long long n, long long C, G g0) {
  const G g = g0.bound();
  for (long long i = cuda::thread_index(); i < n; i += cuda::grid_stride()) dx[i] = from_float<T>(g(i, i % C));
}

template <typename T, typename G>
void map_column_sum(Tensor& dx, Tensor& dbias, long long C, G g) {
  const long long n = dx.numel();
  // No rows but C columns: dx is empty, yet dbias must still be written (zeros, as the CPU's
  // column sums and sum_leading_cuda give), so only a launch with nothing to write returns here.
  if (C == 0 || (n == 0 && !dbias.defined())) return;
  const long long m = n / C;
  cudaStream_t s = cuda::compute_stream();
  if (!dbias.defined()) {
    map_kernel<T><<<cuda::grid_for(n), 256, 0, s>>>(static_cast<T*>(dx.data_ptr()), n, C, g);
    CUDA_CHECK_LAUNCH("fused bias backward (map, no bias gradient)");
    return;
  }
  const cuda::ColumnChunks ch = cuda::plan_column_chunks(m, C);
  const dim3 grid(static_cast<unsigned>((C + cuda::kColTx - 1) / cuda::kColTx), static_cast<unsigned>(ch.count));
  const dim3 block(cuda::kColTx, cuda::kColTy);
  T* dxp = static_cast<T*>(dx.data_ptr());
  if (ch.count == 1) {  // one chunk, whose partial is the answer
    T* dbp = static_cast<T*>(dbias.data_ptr());
    map_column_sum_kernel<T, T><<<grid, block, 0, s>>>(dxp, m, C, ch.rows_per_chunk, dbp, g);
    CUDA_CHECK_LAUNCH("fused bias backward");
    return;
  }
  Tensor partial = Tensor::empty({ch.count, C}, DType::F32, dx.device());
  map_column_sum_kernel<T, float><<<grid, block, 0, s>>>(dxp, m, C, ch.rows_per_chunk, partial.data<float>(), g);
  CUDA_CHECK_LAUNCH("fused bias backward (partials)");
  cuda::column_finish_kernel<T><<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(
      partial.data<float>(), ch.count, C, static_cast<T*>(dbias.data_ptr()));
  CUDA_CHECK_LAUNCH("fused bias backward (column finish)");
}

}  // namespace

void bias_gelu_cuda(const Tensor& x, const Tensor& bias, Tensor& y) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] { bias_map<T>(x, bias, nullptr, y, GeluMap{}); });
}

void bias_gelu_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx, Tensor& dbias) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    GeluGrad<T> g{static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(x.data_ptr()),
                  static_cast<const T*>(bias.data_ptr())};
    map_column_sum<T>(dx, dbias, bias.numel(), g);
  });
}

void bias_dropout_add_cuda(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& y, DropoutMask m) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    bias_map<T>(x, bias, &residual, y, DropoutAddMap{fn::BiasDropoutAdd{{m.p, m.seed, m.offset}}, m.slot});
  });
}

void dropout_bias_backward_cuda(const Tensor& dy, Tensor& dx, Tensor& dbias, DropoutMask m) {
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    DropoutGrad<T> g{static_cast<const T*>(dy.data_ptr()), {m.p, m.seed, m.offset}, m.slot};
    map_column_sum<T>(dx, dbias, dbias.defined() ? dbias.numel() : dy.size(-1), g);
  });
}

void bias_relu_cuda(const Tensor& x, const Tensor& bias, Tensor& y) {
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] { bias_map<T>(x, bias, nullptr, y, ReluMap{}); });
}

void relu_bias_backward_cuda(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias) {
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    ReluGrad<T> g{static_cast<const T*>(dy.data_ptr()), static_cast<const T*>(y.data_ptr())};
    map_column_sum<T>(dx, dbias, dy.size(-1), g);
  });
}

}  // namespace tandem::kernels
