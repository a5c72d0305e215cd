// optim/cuda/lamb.cu: fused multi-tensor LAMB in two phases (see optim/kernels/lamb.h).
//
// Phase 1 (lamb_phase1_kernel, one block per chunk): update the moments, compute the direction u,
// and write the chunk's sum(w^2) and sum(u^2) to a scratch array; then lamb_param_sums_kernel (one
// block per parameter) adds each parameter's chunk partials, in chunk order, to param_sums. No
// atomics anywhere, so the norms - and the whole step - are deterministic for given shapes.
// Phase 2 (lamb_phase2_kernel) recomputes u from the stored moments instead of keeping it in a
// buffer the size of the model, and applies w -= lr * trust * u (under AMP also into the 16-bit copy); a tiny launch then advances the
// counts. Every block computes its step's scalars from the device LR and its segment's count
// (optim/cuda/adam_math.cuh), so segments with different step counts share the launches.
// Skipped (found-inf): phase 1 writes zero partials and returns, the sums kernel adds those zeros,
// phase 2 and the count advance do nothing - the moments, weights and counts stay as they were.
#include "optim/cuda/adam_math.cuh"
#include "optim/kernels/lamb.h"
#include "core/ops/common/cuda/block_reduce.cuh"

namespace tandem::optim::kernels {
namespace {

// One segment of the group: its parameter, its chunks, and whether it is the first segment of that
// parameter in the group (the block that sums the parameter). 16 bytes, no padding.
struct SegEntry {
  int32_t param_index;
  int32_t first_chunk;
  int32_t n_chunks;
  int32_t leader;
};

template <typename T>
__global__ void lamb_phase1_kernel(const AdamChunk* __restrict__ chunks, AdamConst k, const double* __restrict__ lr,
                                   const float* __restrict__ found_inf, float* __restrict__ partials) {
  __shared__ float scratch[32];
  __shared__ AdamHyper h;
  if (skip_step(found_inf)) {  // uniform over the block: no thread reaches the block sums below
    if (threadIdx.x == 0) partials[2 * blockIdx.x] = partials[2 * blockIdx.x + 1] = 0.f;
    return;
  }
  const AdamChunk c = chunks[blockIdx.x];
  block_hyper(h, k, lr, c);
  const T* p = static_cast<const T*>(c.param) + c.start;
  const T* g = static_cast<const T*>(c.grad) + c.start;
  T* m = static_cast<T*>(c.exp_avg) + c.start;
  T* v = static_cast<T*>(c.exp_avg_sq) + c.start;
  float wsq = 0.f, usq = 0.f;
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float pv = cuda::to_float(p[i]);
    float mv, vv;
    adam_moments(m, v, i, cuda::to_float(g[i]), h, mv, vv);
    const float u = lamb_direction(mv, vv, pv, h);
    wsq += pv * pv;
    usq += u * u;
  }
  wsq = cuda::block_sum(wsq, scratch);  // every thread calls both: no early exit above
  usq = cuda::block_sum(usq, scratch);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = wsq;
    partials[2 * blockIdx.x + 1] = usq;
  }
}

__global__ void lamb_param_sums_kernel(const SegEntry* __restrict__ segs, int n_segs,
                                       const float* __restrict__ partials, float* __restrict__ param_sums) {
  __shared__ float scratch[32];
  const SegEntry me = segs[blockIdx.x];
  if (!me.leader) return;  // uniform over the block: block_sum below is never reached by part of it
  float w = 0.f, u = 0.f;
  for (int s = blockIdx.x; s < n_segs; ++s) {
    const SegEntry e = segs[s];
    if (e.param_index != me.param_index) continue;
    for (int k = threadIdx.x; k < e.n_chunks; k += blockDim.x) {
      w += partials[2 * (e.first_chunk + k)];
      u += partials[2 * (e.first_chunk + k) + 1];
    }
  }
  w = cuda::block_sum(w, scratch);
  u = cuda::block_sum(u, scratch);
  // One leader block per parameter in this launch, and launches are stream-ordered: no race.
  if (threadIdx.x == 0) {
    param_sums[2 * me.param_index] += w;
    param_sums[2 * me.param_index + 1] += u;
  }
}

template <typename T>
__global__ void lamb_phase2_kernel(const AdamChunk* __restrict__ chunks, AdamConst k, const double* __restrict__ lr,
                                   const float* __restrict__ found_inf, const float* __restrict__ param_sums,
                                   LowKind low_kind) {
  if (skip_step(found_inf)) return;
  __shared__ AdamHyper h;
  const AdamChunk c = chunks[blockIdx.x];
  block_hyper(h, k, lr, c);
  const float wn = sqrtf(param_sums[2 * c.param_index]);
  const float un = sqrtf(param_sums[2 * c.param_index + 1]);
  const float step = h.lr * ((wn > 0.f && un > 0.f) ? wn / un : 1.f);
  T* p = static_cast<T*>(c.param) + c.start;
  const T* m = static_cast<const T*>(c.exp_avg) + c.start;
  const T* v = static_cast<const T*>(c.exp_avg_sq) + c.start;
  void* low = low_at(c.low, c.start);
  for (int i = threadIdx.x; i < c.len; i += blockDim.x) {
    const float pv = cuda::to_float(p[i]);
    const float u = lamb_direction(cuda::to_float(m[i]), cuda::to_float(v[i]), pv, h);
    const float nv = pv - step * u;
    p[i] = cuda::from_float<T>(nv);
    store_low(low, i, nv, low_kind);  // T is f32 wherever there is a copy
  }
}

std::vector<SegEntry> seg_entries(const std::vector<AdamTensor>& ts) {
  std::vector<SegEntry> out;
  int64_t first = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t n = (ts[i].numel + kChunk - 1) / kChunk;
    bool leader = true;
    for (size_t j = 0; j < i; ++j) leader = leader && ts[j].param_index != ts[i].param_index;
    TANDEM_CHECK(ts[i].param_index >= 0 && ts[i].param_index < (int64_t{1} << 30), "LAMB: param_index ",
                 ts[i].param_index, " out of range");
    out.push_back({static_cast<int32_t>(ts[i].param_index), static_cast<int32_t>(first), static_cast<int32_t>(n),
                   leader ? 1 : 0});
    first += n;
  }
  return out;
}

}  // namespace

void lamb_phase1_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                      const AdamConst& k, double lr, const float* found_inf, float* param_sums) {
  if (!group) group = std::make_shared<AdamCudaGroup>();
  const double* lr_dev = group->lr.get(device, lr, "LAMB");
  const std::vector<AdamChunk> host = adam_chunks(ts);
  if (host.empty()) return;  // every tensor is empty: their sums stay 0
  const int64_t n_chunks = static_cast<int64_t>(host.size());
  check_grid(n_chunks, "LAMB");
  const AdamChunk* dchunks = group->chunks.get(device, host, "LAMB");
  const std::vector<SegEntry> segs = seg_entries(ts);
  const SegEntry* dsegs = group->segments.get(device, segs, "LAMB");
  cudaStream_t stream = cuda::compute_stream(device);
  // Allocated and freed in the step: inside a capture, graph memory that each replay reuses.
  float* partials = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), 2 * n_chunks * sizeof(float), stream),
             "allocating LAMB's per-chunk norm partials");
  TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
    lamb_phase1_kernel<T><<<static_cast<unsigned>(n_chunks), kThreads, 0, stream>>>(dchunks, k, lr_dev, found_inf,
                                                                                    partials);
    CUDA_CHECK_LAUNCH("fused LAMB phase 1 (moments and norms)");
  });
  lamb_param_sums_kernel<<<static_cast<unsigned>(segs.size()), kThreads, 0, stream>>>(
      dsegs, static_cast<int>(segs.size()), partials, param_sums);
  CUDA_CHECK_LAUNCH("LAMB per-parameter norm sums");
  CUDA_CHECK(cudaFreeAsync(partials, stream));
}

void lamb_phase2_cuda(std::shared_ptr<AdamCudaGroup>& group, DType dtype, int device, const std::vector<AdamTensor>& ts,
                      const AdamConst& k, double lr, const float* found_inf, const float* param_sums,
                      LowKind low) {
  if (!group) group = std::make_shared<AdamCudaGroup>();
  const double* lr_dev = group->lr.get(device, lr, "LAMB");  // unchanged since phase 1: no write
  const std::vector<AdamChunk> host = adam_chunks(ts);
  if (!host.empty()) {
    const AdamChunk* dchunks = group->chunks.get(device, host, "LAMB");  // unchanged since phase 1: no upload
    cudaStream_t stream = cuda::compute_stream(device);
    TANDEM_CUDA_FLOAT_TYPES(dtype, T, [&] {
      lamb_phase2_kernel<T><<<static_cast<unsigned>(host.size()), kThreads, 0, stream>>>(dchunks, k, lr_dev,
                                                                                         found_inf, param_sums, low);
      CUDA_CHECK_LAUNCH("fused LAMB phase 2 (trust ratio and update)");
    });
  }
  advance_counts(group->counts, device, adam_counts(ts), found_inf, "LAMB");
}

}  // namespace tandem::optim::kernels
