// core/ops/loss/cuda.cu: cross-entropy and top-k counting on CUDA.
//
// One warp per row: each lane strides over the C logits, then the warp combines. Rows are many
// (batch, or batch x sequence for a language-model head) and C ranges from 10 to ~30k, so a warp
// per row keeps every row's reads coalesced without a block-wide barrier. The statistics are f32
// whatever the logits' dtype. The batch mean is taken by a second, single-block kernel over the
// per-row losses rather than with atomics, so the loss is bit-reproducible run to run.
// expf/logf, not the __expf/__logf intrinsics: the intrinsics' error grows with |x|, and this
// kernel is memory-bound, so the accurate versions cost nothing measurable.
// The vocabulary-parallel pieces (cross_entropy_shard_*) reuse the layout: a warp per row for the
// shard's statistics, a thread per row to combine the shards' (T is small), the same mean kernel.
// Their targets come from the host (dist/tp/cross_entropy.cpp builds them next to the labels it
// picks), already in [-1, Cr).
// Labels are not range-checked on the host for CUDA (that would be a copy and a sync per step; the
// loader checks them before upload). A label outside [0, C) is clamped into range, so no read is
// out of bounds, and counted in g_bad_labels, which take_bad_label_count_cuda() reads lazily.
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/dispatch.h"
#include "core/ops/finite/functors.h"
#include "core/ops/loss/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

constexpr int kWarpsPerBlock = 8;  // 256 threads: enough resident warps to hide load latency

// Out-of-range labels seen by cross_entropy on this device (each device has its own copy of a
// __device__ variable). Integer atomics: the count is order-independent.
__device__ unsigned long long g_bad_labels = 0;

// The label of `row`, clamped into [0, c); counts a clamp when `count` is set (forward only, so
// each bad label is counted once per step).
template <typename L>
__device__ __forceinline__ long long safe_label(const L* lab, long long row, long long c, bool count) {
  long long l = static_cast<long long>(lab[row]);
  if (l >= 0 && l < c) return l;
  if (count) atomicAdd(&g_bad_labels, 1ull);
  return l < 0 ? 0 : c - 1;
}

unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// Per row: lse and the smoothed loss (lse - (1-s) x[label] - (s/C) sum x).
template <typename T, typename L>
__global__ void ce_rows_kernel(const T* x, const L* lab, long long n, long long c, float s, float* lse,
                               float* row_loss) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= n) return;  // whole warps exit together, so the shuffles below stay full-mask
  const T* r = x + row * c;
  float m = -INFINITY;
  for (long long j = lane; j < c; j += 32) m = fmaxf(m, to_float(r[j]));
  m = cuda::warp_max(m);
  float se = 0.f, sx = 0.f;
  for (long long j = lane; j < c; j += 32) {
    float v = to_float(r[j]);
    se += expf(v - m);
    sx += v;
  }
  se = cuda::warp_sum(se);
  sx = cuda::warp_sum(sx);
  if (lane == 0) {
    float l = m + logf(se);
    lse[row] = l;
    row_loss[row] = l - (1.f - s) * to_float(r[safe_label(lab, row, c, true)]) - (s / (float)c) * sx;
  }
}

// loss[0] = mean of row_loss, one block, fixed summation order.
__global__ void mean_kernel(const float* v, long long n, float* out) {
  __shared__ float scratch[32];
  float acc = 0.f;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += v[i];
  acc = cuda::block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = acc / (float)n;
}

template <typename T, typename L>
__global__ void ce_bwd_kernel(const T* x, const L* lab, const float* lse, const float* grad_loss, long long n,
                              long long c, float s, T* d) {
  float scale = grad_loss[0] / (float)n;  // read on the device: no host sync in backward
  float off = s / (float)c;
  long long total = n * c;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    long long row = i / c, col = i - row * c;
    float p = expf(to_float(x[i]) - lse[row]);
    float target = off + (col == safe_label(lab, row, c, false) ? 1.f - s : 0.f);
    d[i] = from_float<T>(scale * (p - target));
  }
}

template <typename T, typename L>
__global__ void topk_kernel(const T* x, const L* lab, long long n, long long c, int k,
                            unsigned long long* correct) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= n) return;
  const T* r = x + row * c;
  const long long label = safe_label(lab, row, c, false);  // checked on the host by topk_correct
  const float ref = to_float(r[label]);
  float above = 0.f;  // counts stay exact in float up to 2^24 classes
  for (long long j = lane; j < c; j += 32) above += fn::ranks_above(to_float(r[j]), j, ref, label) ? 1.f : 0.f;
  above = cuda::warp_sum(above);
  if (lane == 0 && above < (float)k) atomicAdd(correct, 1ull);  // integer atomics: order-independent
}

// ---- vocabulary-parallel pieces (core/ops/loss/loss.h): the same warp-per-row layout ----

// stats [3, n]: the shard's row max, sum exp(x - max), and x[target] (0 where target < 0).
template <typename T>
__global__ void ce_shard_stats_kernel(const T* x, const long long* tgt, long long n, long long c, float* st) {
  long long row = blockIdx.x * (long long)kWarpsPerBlock + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (row >= n) return;  // whole warps exit together
  const T* r = x + row * c;
  float m = -INFINITY;
  for (long long j = lane; j < c; j += 32) m = fmaxf(m, to_float(r[j]));
  m = cuda::warp_max(m);
  float se = 0.f;
  for (long long j = lane; j < c; j += 32) se += expf(to_float(r[j]) - m);
  se = cuda::warp_sum(se);
  if (lane == 0) {
    const long long t = tgt[row];
    st[row] = m;
    st[n + row] = se;
    st[2 * n + row] = t >= 0 && t < c ? to_float(r[t]) : 0.f;  // t < c: never read outside the row
  }
}

// One thread per row over the gathered [shards, 3, n]: lse and the row's loss.
__global__ void ce_shard_combine_kernel(const float* g, long long shards, long long n, float* lse, float* row_loss) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float big = g[i];
    for (long long s = 1; s < shards; ++s) big = fmaxf(big, g[s * 3 * n + i]);
    float se = 0.f, target = 0.f;
    for (long long s = 0; s < shards; ++s) {
      const float* part = g + s * 3 * n;
      se += expf(part[i] - big) * part[n + i];
      target += part[2 * n + i];
    }
    const float l = big + logf(se);
    lse[i] = l;
    row_loss[i] = l - target;
  }
}

template <typename T>
__global__ void ce_shard_grad_kernel(const T* x, const long long* tgt, const float* lse, const float* grad_loss,
                                     long long n, long long c, T* d) {
  float scale = grad_loss[0] / (float)n;  // read on the device: no host sync in backward
  long long total = n * c;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    long long row = i / c, col = i - row * c;
    float p = expf(to_float(x[i]) - lse[row]);
    d[i] = from_float<T>(scale * (p - (col == tgt[row] ? 1.f : 0.f)));
  }
}

}  // namespace

void cross_entropy_fwd_cuda(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss) {
  long long n = logits.size(0), c = logits.size(1);
  Tensor row_loss = Tensor::empty({n}, DType::F32, logits.device());
  TANDEM_CUDA_FLOAT_TYPES(logits.dtype(), T, [&] {
    with_index_ptr(labels, [&](const auto* lab) {
      ce_rows_kernel<<<row_blocks(n), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
          static_cast<const T*>(logits.data_ptr()), lab, n, c, smoothing, lse.data<float>(),
          row_loss.data<float>());
      CUDA_CHECK_LAUNCH();
    });
  });
  mean_kernel<<<1, 1024, 0, cuda::compute_stream()>>>(row_loss.data<float>(), n, loss.data<float>());
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_bwd_cuda(const Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& grad_loss,
                            float smoothing, Tensor& dlogits) {
  long long n = logits.size(0), c = logits.size(1);
  TANDEM_CUDA_FLOAT_TYPES(logits.dtype(), T, [&] {
    with_index_ptr(labels, [&](const auto* lab) {
      ce_bwd_kernel<<<cuda::grid_for(n * c), 256, 0, cuda::compute_stream()>>>(
          static_cast<const T*>(logits.data_ptr()), lab, lse.data<float>(), grad_loss.data<float>(), n, c,
          smoothing, static_cast<T*>(dlogits.data_ptr()));
      CUDA_CHECK_LAUNCH();
    });
  });
}

int64_t topk_correct_cuda(const Tensor& logits, const Tensor& labels, int k) {
  long long n = logits.size(0), c = logits.size(1);
  Tensor correct = Tensor::zeros({1}, DType::I64, logits.device());
  TANDEM_CUDA_FLOAT_TYPES(logits.dtype(), T, [&] {
    with_index_ptr(labels, [&](const auto* lab) {
      topk_kernel<<<row_blocks(n), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
          static_cast<const T*>(logits.data_ptr()), lab, n, c, k,
          reinterpret_cast<unsigned long long*>(correct.data_ptr()));
      CUDA_CHECK_LAUNCH();
    });
  });
  return correct.to_vector_i64()[0];  // the caller asked for a host number: this syncs
}

int64_t take_bad_label_count_cuda() {
  unsigned long long count = 0;
  const unsigned long long zero = 0;
  cudaStream_t s = cuda::compute_stream();
  CUDA_CHECK(cudaMemcpyFromSymbolAsync(&count, g_bad_labels, sizeof(count), 0, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaMemcpyToSymbolAsync(g_bad_labels, &zero, sizeof(zero), 0, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));  // count and zero are host stack variables
  return static_cast<int64_t>(count);
}


void cross_entropy_shard_stats_cuda(const Tensor& logits, const Tensor& targets, Tensor& stats) {
  long long n = logits.size(0), c = logits.size(1);
  TANDEM_CUDA_FLOAT_TYPES(logits.dtype(), T, [&] {
    ce_shard_stats_kernel<<<row_blocks(n), kWarpsPerBlock * 32, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(logits.data_ptr()), reinterpret_cast<const long long*>(targets.data<int64_t>()), n, c,
        stats.data<float>());
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_shard_combine_cuda(const Tensor& gathered, Tensor& lse, Tensor& loss) {
  long long shards = gathered.size(0), n = gathered.size(2);
  Tensor row_loss = Tensor::empty({n}, DType::F32, gathered.device());
  ce_shard_combine_kernel<<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(
      gathered.data<float>(), shards, n, lse.data<float>(), row_loss.data<float>());
  CUDA_CHECK_LAUNCH();
  mean_kernel<<<1, 1024, 0, cuda::compute_stream()>>>(row_loss.data<float>(), n, loss.data<float>());
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_grad_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& grad_loss, Tensor& dlogits) {
  long long n = logits.size(0), c = logits.size(1);
  TANDEM_CUDA_FLOAT_TYPES(logits.dtype(), T, [&] {
    ce_shard_grad_kernel<<<cuda::grid_for(n * c), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(logits.data_ptr()), reinterpret_cast<const long long*>(targets.data<int64_t>()),
        lse.data<float>(), grad_loss.data<float>(), n, c, static_cast<T*>(dlogits.data_ptr()));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::kernels
