// optim/cuda/adam_math.cuh: the per-element AdamW and LAMB math, the per-step scalars and the chunk
// entry and device state they share (internal, CUDA). The same formulas, in the same order, as the
// CPU loops in optim/adamw.cpp and optim/lamb.cpp: element math in f32, scalars in f64 rounded once.
//
// The per-step scalars (adam_hyper) are computed by thread 0 of every block from the device-side
// LR and the segment's update count - nothing that changes between steps is a kernel argument, so a
// CUDA graph replays them correctly (optim/optimizer.h, "Capturable"). Each operation is an
// explicitly rounded intrinsic (__dmul_rn ...), so nvcc cannot contract 1 - lr * wd into an FMA that
// the host code does not do: every scalar then equals the host's f64-then-f32 value except where
// CUDA's pow (at most 2 ulp in f64, CUDA C Programming Guide, "Mathematical Functions") and the
// host's differ in f64 by enough to move the f32 rounding - at the early steps, where 1 - beta^t
// magnifies pow's error at most 1 / (1 - beta2) = 1000-fold, that is a chance of order 1e-6 per
// scalar, and a one-ulp change of a scalar when it happens. Eager and replayed CUDA steps use these
// same kernels, so they agree bitwise; CUDA against the CPU is judged by tests/gpu_optim_parity.cpp.
#pragma once
#include <vector>

#include "optim/cuda/multi_tensor.cuh"
#include "optim/kernels/adamw.h"

namespace tandem::optim::kernels {

// One chunk of one segment. 64 bytes, no padding (DeviceTable compares bytes).
struct AdamChunk {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  const float* step;  // the segment's update count
  void* low;          // the segment's 16-bit copy (not offset); null: none
  int64_t start;
  int32_t len;
  int32_t param_index;
};

class AdamCudaGroup {
 public:
  DeviceTable chunks;    // AdamChunk per chunk
  DeviceTable segments;  // LAMB: its per-segment entries (optim/cuda/lamb.cu)
  DeviceTable counts;    // float* per segment, for advance_counts
  DeviceValue lr;
};

// Builds the chunk table of `ts`, in order.
std::vector<AdamChunk> adam_chunks(const std::vector<AdamTensor>& ts);
// The update counts of `ts`, in order (every segment, empty ones included).
std::vector<float*> adam_counts(const std::vector<AdamTensor>& ts);

// The scalars of step t = count + 1 at LR lr, as AdamBase's host code computes them (see the top).
__device__ __forceinline__ AdamHyper adam_hyper(const AdamConst& k, double lr, float count) {
  const double t = static_cast<double>(count) + 1.0;
  const double bc1 = __dsub_rn(1.0, pow(k.beta1_f64, t));
  const double bc2 = __dsub_rn(1.0, pow(k.beta2_f64, t));
  AdamHyper h;
  static_cast<AdamElementConst&>(h) = k;  // the run constants as they are
  h.lr = __double2float_rn(lr);
  h.bias_correction1 = __double2float_rn(bc1);
  h.bias_correction2_sqrt = __double2float_rn(__dsqrt_rn(bc2));
  h.step_size = __double2float_rn(__ddiv_rn(lr, bc1));
  h.decay = __double2float_rn(__dsub_rn(1.0, __dmul_rn(lr, k.weight_decay_f64)));
  return h;
}

// Thread 0 computes the block's scalars into shared memory; every thread must call it (it holds a
// __syncthreads), and a chunk lies in one segment, so the scalars are the block's.
__device__ __forceinline__ void block_hyper(AdamHyper& shared, const AdamConst& k, const double* lr,
                                            const AdamChunk& c) {
  if (threadIdx.x == 0) shared = adam_hyper(k, *lr, *c.step);
  __syncthreads();
}

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
