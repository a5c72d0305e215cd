// core/ops/attention/cuda_sdpa_prep.cu: the two device-side inputs of cuDNN's SDPA graphs that
// tandem computes itself (semantics in core/ops/attention/kernels.h): the per-sequence lengths from
// the key mask, and the dropout seed and first counter from a Generator's draw.
//
// Both run on the compute stream and read nothing back to the host, so an attention call keeps
// the step free of syncs and a captured CUDA graph replays them: the lengths follow the mask that
// the replay's batch holds, and the rng values come from the GraphRng slot (core/graph_rng.h) when
// the draw has one, so every replay draws new dropout masks.
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/attention/kernels.h"

namespace tandem::kernels {
namespace {

// One warp per sequence: lengths[b] = sq, lengths[B + b] = the number of kept keys of row b.
__global__ void sdpa_lengths_kernel(const int32_t* mask, long long batch, long long sk, int32_t sq, int32_t* lengths) {
  const long long b = blockIdx.x * 8LL + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (b >= batch) return;  // whole warps exit together
  float n = 0.f;           // exact: counts stay far below 2^24
  for (long long j = lane; j < sk; j += 32) n += mask[b * sk + j] != 0 ? 1.f : 0.f;
  n = cuda::warp_sum(n);
  if (lane == 0) {
    lengths[b] = sq;
    lengths[batch + b] = static_cast<int32_t>(n);
  }
}

__global__ void sdpa_rng_kernel(uint64_t seed, uint64_t offset, const uint64_t* slot, int64_t* rng) {
  rng[0] = static_cast<int64_t>(slot ? slot[0] : seed);
  rng[1] = static_cast<int64_t>(slot ? slot[1] + offset : offset);
}

}  // namespace

void sdpa_lengths_cuda(const Tensor& mask, int64_t sq, Tensor& lengths) {
  const long long batch = mask.size(0), sk = mask.size(1);
  if (batch == 0) return;
  sdpa_lengths_kernel<<<static_cast<unsigned>((batch + 7) / 8), 256, 0, cuda::compute_stream()>>>(
      static_cast<const int32_t*>(mask.data_ptr()), batch, sk, static_cast<int32_t>(sq),
      static_cast<int32_t*>(lengths.data_ptr()));
  CUDA_CHECK_LAUNCH("sdpa key lengths");
}

void sdpa_rng_cuda(const RngDraw& draw, Tensor& rng) {
  sdpa_rng_kernel<<<1, 1, 0, cuda::compute_stream()>>>(draw.seed, draw.offset, draw.slot,
                                                       static_cast<int64_t*>(rng.data_ptr()));
  CUDA_CHECK_LAUNCH("sdpa dropout seed and offset");
}

}  // namespace tandem::kernels
