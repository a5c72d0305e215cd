// optim/cuda/amp.cu: the fused unscale + inf/NaN check as one multi-tensor launch (optim/kernels/amp.h).
//
// The chunk scheme of optim/cuda/multi_tensor.cuh: block b unscales chunk b of the list. A thread
// that sees a non-finite value stores 1 into *found_inf; every writer stores the same value, so the
// race is benign and no atomic is needed. The flag stays on the device: the caller reads it once per
// step, after all dtypes (one host sync, which the skip decision needs anyway).
#include "optim/cuda/multi_tensor.cuh"
#include "optim/kernels/amp.h"

namespace tandem::optim::kernels {
namespace {

struct UnscaleChunk {  // 32 bytes, no padding
  const void* src;
  float* dst;
  int64_t start;
  int64_t len;
};

template <typename T>
__global__ void unscale_check_kernel(const UnscaleChunk* __restrict__ chunks, float inv_scale, int* found_inf) {
  const UnscaleChunk c = chunks[blockIdx.x];
  const T* s = static_cast<const T*>(c.src) + c.start;
  float* d = c.dst + c.start;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float v = cuda::to_float(s[i]);
    bad |= !isfinite(v);
    d[i] = v * inv_scale;
  }
  if (bad) *found_inf = 1;
}

}  // namespace

void unscale_check_cuda(DType src_dtype, int device, const std::vector<UnscalePair>& ts, float inv_scale,
                        int* found_inf) {
  std::vector<UnscaleChunk> host;
  for (const auto& t : ts)
    for_each_chunk(t.numel, [&](int64_t s, int32_t len) { host.push_back({t.src, t.dst, s, len}); });
  if (host.empty()) return;
  check_grid(static_cast<int64_t>(host.size()), "AMP unscale");
  DeviceTable table;  // freed stream-ordered after the launch below
  const UnscaleChunk* chunks = table.get(device, host);
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(src_dtype, T, [&] {
    unscale_check_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, inv_scale, found_inf);
    CUDA_CHECK_LAUNCH("AMP unscale and inf/NaN check");
  });
}

}  // namespace tandem::optim::kernels
