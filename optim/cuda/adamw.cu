// optim/cuda/adamw.cu: fused multi-tensor AdamW - one kernel launch updates every segment of a group.
//
// torch.optim.AdamW's update (amsgrad = False) per element, in f32 whatever the storage dtype:
//   w = w * (1 - lr * wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w = w - (lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
// and, under AMP, the new w rounded into the segment's 16-bit copy in the same loop.
// Each block reads its segment's step t and the LR from device memory and computes the scalars
// (optim/cuda/adam_math.cuh), so segments with different step counts share one launch and a
// captured graph follows the LR schedule and the counts. A second launch advances the counts.
// Chunking and the cached chunk table: optim/cuda/multi_tensor.cuh.
#include "optim/cuda/adam_math.cuh"

namespace tandem::optim::kernels {
namespace {

template <typename T>
__global__ void adamw_kernel(const AdamChunk* __restrict__ chunks, AdamConst k, const double* __restrict__ lr,
                             const float* __restrict__ found_inf, LowKind low_kind) {
  if (skip_step(found_inf)) return;
  __shared__ AdamHyper h;
  const AdamChunk c = chunks[blockIdx.x];
  block_hyper(h, k, lr, c);
  T* p = static_cast<T*>(c.param) + c.start;
  const T* g = static_cast<const T*>(c.grad) + c.start;
  T* m = static_cast<T*>(c.exp_avg) + c.start;
  T* v = static_cast<T*>(c.exp_avg_sq) + c.start;
  void* low = low_at(c.low, c.start);
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float pv = cuda::to_float(p[i]) * h.decay;
    float mv, vv;
    adam_moments(m, v, i, cuda::to_float(g[i]), h, mv, vv);
    const float denom = sqrtf(vv) / h.bias_correction2_sqrt + h.eps;
    const float nv = pv - h.step_size * (mv / denom);
    p[i] = cuda::from_float<T>(nv);
    store_low(low, i, nv, low_kind);  // T is f32 wherever there is a copy
  }
}

}  // namespace

std::vector<AdamChunk> adam_chunks(const std::vector<AdamTensor>& ts) {
  std::vector<AdamChunk> out;
  for (const auto& t : ts)
    for_each_chunk(t.numel, [&](int64_t start, int32_t len) {
      out.push_back({t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.step, t.low, start, len,
                     static_cast<int32_t>(t.param_index)});
    });
  return out;
}

std::vector<float*> adam_counts(const std::vector<AdamTensor>& ts) {
  std::vector<float*> out;
  for (const auto& t : ts) out.push_back(t.step);
  return out;
}

void adamw_step_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                     const AdamConst& k, double lr, const float* found_inf, LowKind low) {
  if (!group) group = std::make_shared<AdamCudaGroup>();
  const double* lr_dev = group->lr.get(device, lr, "AdamW");
  const std::vector<AdamChunk> host = adam_chunks(ts);
  if (!host.empty()) {  // else every tensor is empty: only their counts advance
    check_grid(static_cast<int64_t>(host.size()), "AdamW");
    const AdamChunk* chunks = group->chunks.get(device, host, "AdamW");
    cudaStream_t stream = cuda::compute_stream(device);
    TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
      adamw_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(chunks, k, lr_dev, found_inf, low);
      CUDA_CHECK_LAUNCH("fused AdamW step");
    });
  }
  advance_counts(group->counts, device, adam_counts(ts), found_inf, "AdamW");
}

void adam_set_lr_cuda(const std::shared_ptr<AdamCudaGroup>& group, double lr) {
  if (group) group->lr.set(lr, "AdamW/LAMB");
}

}  // namespace tandem::optim::kernels
