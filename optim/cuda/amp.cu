// optim/cuda/amp.cu: mixed precision's fused passes as multi-tensor launches (optim/kernels/amp.h).
//
// The chunk scheme of optim/cuda/multi_tensor.cuh: block b works on chunk b of the list.
// Unscale: a thread that sees a non-finite value stores 1 into *found_inf; every writer stores the
// same value, so the race is benign and no atomic is needed. The eager form (unscale_check_cuda)
// takes inv_scale as an argument and ORs into an int the caller reads once per step, after all
// dtypes (one host sync, which the host-side skip decision needs anyway), and builds its table per
// call. The capturable forms read every changing value from device memory - the scale, the flag -
// and keep their chunk tables across steps, so a CUDA graph can hold them (optim/amp.h).
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

struct CopyChunk {  // 32 bytes, no padding
  const float* src;
  void* dst;
  int64_t start;
  int64_t len;
};

// scale: null for the eager form (inv_scale given); else read here, rounded as the host path does.
template <typename T, typename Flag>
__global__ void unscale_check_kernel(const UnscaleChunk* __restrict__ chunks, float inv_scale,
                                     const float* __restrict__ scale, Flag* found_inf) {
  const UnscaleChunk c = chunks[blockIdx.x];
  const float inv = scale ? __double2float_rn(__ddiv_rn(1.0, static_cast<double>(*scale))) : inv_scale;
  const T* s = static_cast<const T*>(c.src) + c.start;
  float* d = c.dst + c.start;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float v = cuda::to_float(s[i]);
    bad |= !isfinite(v);
    d[i] = v * inv;
  }
  if (bad) *found_inf = Flag(1);
}

template <typename T>
__global__ void copy_back_kernel(const CopyChunk* __restrict__ chunks, const float* __restrict__ found_inf) {
  if (skip_step(found_inf)) return;
  const CopyChunk c = chunks[blockIdx.x];
  const float* s = c.src + c.start;
  T* d = static_cast<T*>(c.dst) + c.start;
  for (int64_t i = threadIdx.x; i < c.len; i += blockDim.x) d[i] = cuda::from_float<T>(s[i]);
}

__global__ void scaler_update_kernel(float* state, const float* found_inf, ScalerRule r) {
  scaler_update(state, *found_inf, r);
}

std::vector<UnscaleChunk> unscale_chunks(const std::vector<UnscalePair>& ts) {
  std::vector<UnscaleChunk> host;
  for (const auto& t : ts)
    for_each_chunk(t.numel, [&](int64_t s, int32_t len) { host.push_back({t.src, t.dst, s, len}); });
  return host;
}

}  // namespace

void unscale_check_cuda(DType src_dtype, int device, const std::vector<UnscalePair>& ts, float inv_scale,
                        int* found_inf) {
  const std::vector<UnscaleChunk> host = unscale_chunks(ts);
  if (host.empty()) return;
  check_grid(static_cast<int64_t>(host.size()), "AMP unscale");
  DeviceTable table;  // freed stream-ordered after the launch below
  const UnscaleChunk* chunks = table.get(device, host, "AMP unscale");
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(src_dtype, T, [&] {
    unscale_check_kernel<T, int><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, inv_scale,
                                                                                              nullptr, found_inf);
    CUDA_CHECK_LAUNCH("AMP unscale and inf/NaN check");
  });
}

void unscale_flag_cuda(std::shared_ptr<DeviceTable>& table, DType src_dtype, int device,
                       const std::vector<UnscalePair>& ts, const float* scale, float* found_inf) {
  const std::vector<UnscaleChunk> host = unscale_chunks(ts);
  if (host.empty()) return;
  const UnscaleChunk* chunks = cached_chunks(table, device, host, "AMP unscale");
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(src_dtype, T, [&] {
    unscale_check_kernel<T, float><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, 0.f, scale,
                                                                                                found_inf);
    CUDA_CHECK_LAUNCH("AMP unscale and inf/NaN check (device scale)");
  });
}

void copy_back_cuda(std::shared_ptr<DeviceTable>& table, DType dst_dtype, int device, const std::vector<CopyPair>& ts,
                    const float* found_inf) {
  std::vector<CopyChunk> host;
  for (const auto& t : ts)
    for_each_chunk(t.numel, [&](int64_t s, int32_t len) { host.push_back({t.src, t.dst, s, len}); });
  if (host.empty()) return;
  const CopyChunk* chunks = cached_chunks(table, device, host, "AMP copy-back");
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(dst_dtype, T, [&] {
    copy_back_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, found_inf);
    CUDA_CHECK_LAUNCH("AMP master copy-back");
  });
}

void scaler_update_cuda(int device, float* state, const float* found_inf, const ScalerRule& r) {
  scaler_update_kernel<<<1, 1, 0, cuda::compute_stream(device)>>>(state, found_inf, r);
  CUDA_CHECK_LAUNCH("loss scaler update");
}

}  // namespace tandem::optim::kernels
