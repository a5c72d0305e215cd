// optim/cuda/adam_math.cuh: the per-element AdamW and LAMB math and the chunk entry they share
// (internal, CUDA). The same formulas, in the same order, as the CPU loops in optim/adamw.cpp and
// optim/lamb.cpp: all in f32, with the per-step scalars of kernels::AdamHyper.
#pragma once
#include "optim/cuda/multi_tensor.cuh"
#include "optim/kernels/adamw.h"

namespace tandem::optim::kernels {

// One chunk of one segment. 48 bytes, no padding (DeviceTable compares bytes).
struct AdamChunk {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t start;
  int32_t len;
  int32_t param_index;
};

// Builds the chunk table of `ts`, in order.
std::vector<AdamChunk> adam_chunks(const std::vector<AdamTensor>& ts);

// Updates the moments in place and returns them as stored (rounded to T), so that LAMB's second
// phase, which reads them back, sees exactly the values the first phase used.
template <typename T>
__device__ __forceinline__ void adam_moments(T* m, T* v, int i, float g, const AdamHyper& h, float& mv, float& vv) {
  mv = h.beta1 * cuda::to_float(m[i]) + h.one_minus_beta1 * g;
  vv = h.beta2 * cuda::to_float(v[i]) + h.one_minus_beta2 * g * g;
  const T ms = cuda::from_float<T>(mv), vs = cuda::from_float<T>(vv);
  m[i] = ms;
  v[i] = vs;
  mv = cuda::to_float(ms);
  vv = cuda::to_float(vs);
}

// LAMB's update direction u = m_hat / (sqrt(v_hat) + eps) + wd * w.
__device__ __forceinline__ float lamb_direction(float mv, float vv, float w, const AdamHyper& h) {
  return (mv / h.bias_correction1) / (sqrtf(vv) / h.bias_correction2_sqrt + h.eps) + h.weight_decay * w;
}

}  // namespace tandem::optim::kernels
