// core/ops/embedding/cuda.cu: embedding gather and scatter-add on CUDA.
//
// Forward: one thread per output element, a plain gather (consecutive threads read consecutive
// features of a row, so loads are coalesced).
// Backward: atomicAdd of every dout element into its row of the gradient. Atomics, because which
// rows repeat (a frequent token, a position shared by the whole batch) is data-dependent; the
// deterministic alternative (sort the indices, then a segmented sum) is two more passes and much
// more code for a gradient that is a small part of a step. The adds are done in f32:
//   - f32 tables add straight into dtable;
//   - f16/bf16 tables add into an f32 scratch [V, D] that is then cast into dtable. Adding into the
//     16-bit table directly would round after every add: a position embedding receives B adds per
//     step, and with bf16's 8-bit mantissa the small late contributions would vanish against the
//     large running sum (and the result would depend on the atomics' order far more visibly).
// f32 atomics still make the last bits order-dependent; the parity test's tolerance says so.
// Indices were range-checked on the host by core/ops/embedding/embedding.cpp; a negative one is
// embedding_shard's "another shard's row": zeros forward, nothing backward.
#include <type_traits>

#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/common/dispatch.h"
#include "core/ops/copy/kernels.h"
#include "core/ops/embedding/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

// Calls f(i, r, j) for every element i of the k x d looked-up rows (grid-stride): i's row holds
// table row r = ix[i / d] (< 0: another shard's row), and i is its column j.
template <typename I, typename F>
__device__ void for_each_looked_up(const I* ix, long long k, long long d, F f) {
  const long long n = k * d;
  for (long long i = cuda::thread_index(); i < n; i += cuda::grid_stride()) {
    const long long row = i / d;
    f(i, (long long)ix[row], i - row * d);
  }
}

template <typename T, typename I>
__global__ void gather_kernel(const I* ix, const T* table, long long k, long long d, T* out) {
  for_each_looked_up(ix, k, d, [&](long long i, long long r, long long j) {
    out[i] = r < 0 ? from_float<T>(0.f) : table[r * d + j];
  });
}

template <typename T, typename I>
__global__ void scatter_add_kernel(const I* ix, const T* dout, long long k, long long d, float* acc) {
  for_each_looked_up(ix, k, d, [&](long long i, long long r, long long j) {
    if (r >= 0) atomicAdd(acc + r * d + j, to_float(dout[i]));
  });
}

}  // namespace

void embedding_fwd_cuda(const Tensor& indices, const Tensor& table, Tensor& out) {
  long long k = indices.numel(), d = table.size(1);
  if (k * d == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(table.dtype(), T, [&] {
    with_index_ptr(indices, [&](const auto* ix) {
      gather_kernel<<<cuda::grid_for(k * d), 256, 0, cuda::compute_stream()>>>(
          ix, static_cast<const T*>(table.data_ptr()), k, d, static_cast<T*>(out.data_ptr()));
      CUDA_CHECK_LAUNCH();
    });
  });
}

void embedding_bwd_cuda(const Tensor& indices, const Tensor& dout, Tensor& dtable) {
  long long k = indices.numel(), d = dtable.size(1);
  bool direct = dtable.dtype() == DType::F32;
  Tensor acc = direct ? dtable : Tensor::empty(dtable.shape(), DType::F32, dtable.device());
  CUDA_CHECK(cudaMemsetAsync(acc.data_ptr(), 0, acc.nbytes(), cuda::compute_stream()),
             "zeroing the embedding gradient");
  if (k * d > 0) {
    TANDEM_CUDA_FLOAT_TYPES(dout.dtype(), T, [&] {
      with_index_ptr(indices, [&](const auto* ix) {
        scatter_add_kernel<<<cuda::grid_for(k * d), 256, 0, cuda::compute_stream()>>>(
            ix, static_cast<const T*>(dout.data_ptr()), k, d, acc.data<float>());
        CUDA_CHECK_LAUNCH();
      });
    });
  }
  if (!direct) cast_cuda(acc, dtable);
}

}  // namespace tandem::kernels
