// core/ops/finite/cuda.cu: the inf/NaN count as one kernel launch per dtype for a whole tensor
// list (core/ops/finite/kernels.h).
//
// The list travels as a kernel argument (SpanTable, by value): no table upload, hence no host
// memory to keep alive and nothing a CUDA graph capture would refuse (a pageable host-to-device
// copy), and the kernel reads it through the constant bank. kMaxSpans = 512 entries are 8 KiB of
// parameters: CUDA 12.1 raised the kernel parameter limit from 4 KiB to 32,764 bytes on Volta and
// later, and CUDA 13 targets nothing older. 512 covers every model here in one launch (ResNet-152
// has 467 parameter tensors); a longer list takes one launch per 512.
// Each thread walks every span with a grid-stride loop, so a large tensor spreads over the whole
// grid; the grid is a few blocks per SM, because each thread also pays one loop test per span.
// Counts are integers: a warp sums its lanes' counts and one lane adds them to the device counter
// with an atomic, whose order cannot change the total.
// Elements are read at their own width (2 bytes for f16/bf16), not in 16-byte vectors: this pass
// runs once per step over the gradients, and a check is not worth a second vector-access path.
#include <algorithm>
#include <cstdint>

#include "core/ops/common/cuda/block_reduce.cuh"
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/finite/functors.h"
#include "core/ops/finite/kernels.h"

namespace tandem::kernels {
namespace {

constexpr int kMaxSpans = 512;
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 resident threads per SM: enough loads in flight to stream

struct SpanTable {
  const void* data[kMaxSpans];
  long long numel[kMaxSpans];
  int count;
};

template <typename Rule>
__global__ void count_nonfinite_kernel(const SpanTable t, Rule rule, unsigned long long* count) {
  using Bits = typename Rule::Bits;
  unsigned long long n = 0;
  for (int s = 0; s < t.count; ++s) {
    const Bits* p = static_cast<const Bits*>(t.data[s]);
    for (long long i = cuda::thread_index(); i < t.numel[s]; i += cuda::grid_stride()) n += rule(p[i]) ? 1 : 0;
  }
  // Every thread of the grid gets here (no early exit), so the full-mask shuffles are safe.
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(cuda::kFullMask, n, o);
  if ((threadIdx.x & 31) == 0 && n != 0) atomicAdd(count, n);
}

unsigned grid_size(int device, long long largest) {
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::min(cuda::grid_for(largest, kThreads), static_cast<unsigned>(std::max(sms, 1) * kBlocksPerSm));
}

}  // namespace

void count_nonfinite_cuda(DType dtype, int device, const std::vector<FiniteSpan>& spans, int64_t* count) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long), "the counter is an i64 tensor read as u64");
  auto* counter = reinterpret_cast<unsigned long long*>(count);
  cudaStream_t stream = cuda::compute_stream(device);
  fn::with_nonfinite_rule(dtype, [&](auto rule) {
    for (size_t first = 0; first < spans.size(); first += kMaxSpans) {
      SpanTable t{};
      long long largest = 0;
      t.count = static_cast<int>(std::min<size_t>(kMaxSpans, spans.size() - first));
      for (int s = 0; s < t.count; ++s) {
        t.data[s] = spans[first + s].data;
        t.numel[s] = spans[first + s].numel;
        largest = std::max(largest, t.numel[s]);
      }
      count_nonfinite_kernel<<<grid_size(device, largest), kThreads, 0, stream>>>(t, rule, counter);
      CUDA_CHECK_LAUNCH("inf/NaN count");
    }
  });
}

}  // namespace tandem::kernels
