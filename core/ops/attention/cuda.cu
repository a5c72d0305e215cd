// core/ops/attention/cuda.cu: scale-mask-softmax(-dropout) on CUDA, forward and backward
// (semantics in core/ops/attention/kernels.h).
//
// One warp per row, as the loss and layer-norm kernels: rows are many (B * H * Sq, tens of
// thousands for BERT) and short (Sk = 128..512 keys), so a warp per row keeps reads coalesced with
// no block barrier. The row is read three times (max, sum, write); at these lengths it stays in
// L1. Statistics are f32 whatever the dtype; exp is expf (not __expf) so f32 results stay within a
// few ulp of the CPU's double reference. The dropout mask is fn::Dropout's counter rule, so it
// matches the CPU bit for bit.
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/dropout/functors.h"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kWarpsPerBlock = 8;  // 256 threads

unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

__device__ __forceinline__ bool is_masked(const int32_t* mrow, long long j) { return mrow && mrow[j] == 0; }

template <typename T>
__global__ void sms_fwd_kernel(const T* x, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop, T* probs, T* out) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= a.rows) return;  // whole warps exit together, so the shuffles stay full-mask
  const long long cols = a.cols, base = row * cols;
  const int32_t* mrow = mask ? mask + (row / a.rows_per_batch) * cols : nullptr;
  float m = kMaskedScore;  // a fully masked row has max kMaskedScore, and then is uniform
  for (long long j = lane; j < cols; j += 32)
    m = fmaxf(m, is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[base + j]));
  m = cuda::warp_max(m);
  float s = 0.f;
  for (long long j = lane; j < cols; j += 32)
    s += expf((is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[base + j])) - m);
  s = cuda::warp_sum(s);
  const float inv = 1.f / s;
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float z = is_masked(mrow, j) ? kMaskedScore : a.scale * to_float(x[i]);
    const T p = from_float<T>(expf(z - m) * inv);
    probs[i] = p;
    // Dropout scales the rounded probability, as the CPU does (it drops from the stored p).
    if (a.dropout) out[i] = from_float<T>(drop(to_float(p), static_cast<uint64_t>(i)));
  }
}

template <typename T>
__global__ void sms_bwd_kernel(const T* probs, const T* dy, const int32_t* mask, SoftmaxArgs a, fn::Dropout drop,
                               T* dx) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= a.rows) return;
  const long long cols = a.cols, base = row * cols;
  const int32_t* mrow = mask ? mask + (row / a.rows_per_batch) * cols : nullptr;
  float dot = 0.f;
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float g = a.dropout ? drop(to_float(dy[i]), static_cast<uint64_t>(i)) : to_float(dy[i]);
    dot += g * to_float(probs[i]);
  }
  dot = cuda::warp_sum(dot);
  for (long long j = lane; j < cols; j += 32) {
    const long long i = base + j;
    const float g = a.dropout ? drop(to_float(dy[i]), static_cast<uint64_t>(i)) : to_float(dy[i]);
    dx[i] = is_masked(mrow, j) ? from_float<T>(0.f) : from_float<T>(a.scale * to_float(probs[i]) * (g - dot));
  }
}

const int32_t* mask_ptr(const Tensor& mask) {
  return mask.defined() ? static_cast<const int32_t*>(mask.data_ptr()) : nullptr;
}

}  // namespace

void scale_mask_softmax_fwd_cuda(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                 Tensor& out) {
  if (a.rows == 0 || a.cols == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    sms_fwd_kernel<T><<<row_blocks(a.rows), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(x.data_ptr()), mask_ptr(mask), a, fn::Dropout{a.dropout_p, a.seed, a.offset},
        static_cast<T*>(probs.data_ptr()), static_cast<T*>(out.data_ptr()));
    CUDA_CHECK_LAUNCH("scale_mask_softmax forward");
  });
  if (!a.dropout && out.data_ptr() != probs.data_ptr())
    CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), probs.data_ptr(), probs.nbytes(), cudaMemcpyDeviceToDevice,
                               cuda::compute_stream()),
               "scale_mask_softmax copy");
}

void scale_mask_softmax_bwd_cuda(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                 Tensor& dx) {
  if (a.rows == 0 || a.cols == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(probs.dtype(), T, [&] {
    sms_bwd_kernel<T><<<row_blocks(a.rows), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(probs.data_ptr()), static_cast<const T*>(dy.data_ptr()), mask_ptr(mask), a,
        fn::Dropout{a.dropout_p, a.seed, a.offset}, static_cast<T*>(dx.data_ptr()));
    CUDA_CHECK_LAUNCH("scale_mask_softmax backward");
  });
}

}  // namespace tandem::kernels
