// optim/kernels/clip.h: backend entry points of gradient-norm clipping (internal to optim/).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace tandem::optim::kernels {

class DeviceTable;  // optim/cuda/multi_tensor.cuh

struct GradTensor {
  void* data;
  int64_t numel;
};

#ifdef TANDEM_WITH_CUDA
// Sum of squares over every tensor (one dtype, one device): a multi-tensor reduction on the compute
// stream (per-chunk partials, then one block sums them in a fixed order - deterministic), whose
// single f32 result is read back: the one host sync of clipping.
double sum_squares_cuda(DType dtype, int device, const std::vector<GradTensor>& ts);
// Multiplies every tensor by `scale` in one launch (no sync).
void scale_cuda(DType dtype, int device, const std::vector<GradTensor>& ts, float scale);

// GradClipper's launches (optim/clip.h), none of which reads anything back:
// the same f32 sum of squares as sum_squares_cuda, written to *total on the device;
void sum_squares_to_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device,
                         const std::vector<GradTensor>& ts, float* total);
// *sum_sq = float(sum over g of double(totals[g])), in order (one thread);
void sum_totals_cuda(int device, const float* totals, int n, float* sum_sq);
// norm = sqrt(double(*sum_sq)), coefficient = max_norm / (norm + 1e-6) where the norm is finite and
// that is below 1, else 1 - in f64 as the host code, each rounded once to f32 (one thread);
void clip_coefficient_cuda(int device, const float* sum_sq, double max_norm, float* norm, float* coef);
// every tensor multiplied by *coef, unless *coef >= 1 (one launch).
void scale_by_cuda(std::shared_ptr<DeviceTable>& table, DType dtype, int device, const std::vector<GradTensor>& ts,
                   const float* coef);
#endif

}  // namespace tandem::optim::kernels
