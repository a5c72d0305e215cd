// optim/kernels/clip.h: backend entry points of gradient-norm clipping (internal to optim/).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tandem::optim::kernels {

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
#endif

}  // namespace tandem::optim::kernels
