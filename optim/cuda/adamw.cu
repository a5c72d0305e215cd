// optim/cuda/adamw.cu: fused multi-tensor AdamW - one kernel launch updates every segment of a group.
//
// torch.optim.AdamW's update (amsgrad = False) per element, in f32 whatever the storage dtype:
//   w = w * (1 - lr * wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w = w - (lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
// The bias corrections are per-launch scalars (optim/adam_base.h groups segments by step count).
// Chunking and the cached chunk table: optim/cuda/multi_tensor.cuh.
#include "optim/cuda/adam_math.cuh"

namespace tandem::optim::kernels {
namespace {

template <typename T>
__global__ void adamw_kernel(const AdamChunk* __restrict__ chunks, AdamHyper h) {
  const AdamChunk c = chunks[blockIdx.x];
  T* p = static_cast<T*>(c.param) + c.start;
  const T* g = static_cast<const T*>(c.grad) + c.start;
  T* m = static_cast<T*>(c.exp_avg) + c.start;
  T* v = static_cast<T*>(c.exp_avg_sq) + c.start;
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float pv = cuda::to_float(p[i]) * h.decay;
    float mv, vv;
    adam_moments(m, v, i, cuda::to_float(g[i]), h, mv, vv);
    const float denom = sqrtf(vv) / h.bias_correction2_sqrt + h.eps;
    p[i] = cuda::from_float<T>(pv - h.step_size * (mv / denom));
  }
}

}  // namespace

std::vector<AdamChunk> adam_chunks(const std::vector<AdamTensor>& ts) {
  std::vector<AdamChunk> out;
  for (const auto& t : ts)
    for_each_chunk(t.numel, [&](int64_t start, int32_t len) {
      out.push_back({t.param, t.grad, t.exp_avg, t.exp_avg_sq, start, len, static_cast<int32_t>(t.param_index)});
    });
  return out;
}

void adamw_step_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device, const std::vector<AdamTensor>& ts,
                     const AdamHyper& h) {
  const std::vector<AdamChunk> host = adam_chunks(ts);
  if (host.empty()) return;  // every tensor is empty
  check_grid(static_cast<int64_t>(host.size()), "AdamW");
  if (!table) table = std::make_shared<DeviceTable>();
  const AdamChunk* chunks = table->get(device, host);
  cudaStream_t stream = cuda::compute_stream(device);
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    adamw_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, h);
    CUDA_CHECK_LAUNCH("fused AdamW step");
  });
}

}  // namespace tandem::optim::kernels
