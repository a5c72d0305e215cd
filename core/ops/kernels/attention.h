// core/ops/kernels/attention.h: backend entry points for the fused scale-mask-softmax(-dropout)
// of the reference attention path (internal).
//
// Scores are viewed as rows of `cols` keys: x [rows, cols] with rows = B * H * Sq. Row r belongs to
// batch entry b = r / rows_per_batch, whose key mask is mask[b, 0 .. cols) (i32, nonzero = keep;
// undefined = keep everything). Forward, per row:
//   z_j   = masked_j ? kMaskedScore : scale * x_j
//   p_j   = exp(z_j - max z) / sum exp(z - max z)                     (written to `probs`)
//   y_j   = dropout ? keep_j * p_j / (1 - dropout_p) : p_j            (written to `out`)
// with keep_j = fn::Dropout{dropout_p, seed, offset}.keep(r * cols + j), the same counter rule as
// core/ops/dropout.h, so the CPU and CUDA masks are bit-identical. `out` may alias `probs` when
// there is no dropout. Backward (probs saved from the forward, the mask recomputed):
//   g_j   = dropout ? keep_j * dy_j / (1 - dropout_p) : dy_j
//   dx_j  = masked_j ? 0 : scale * p_j * (g_j - sum_k g_k p_k)
// Masked scores get an exactly zero gradient: the forward does not depend on them (they are
// replaced, not added to), so 0 is their true derivative.
// Statistics are f32 on CUDA and double on the CPU (the reference), whatever the dtype.
#pragma once
#include <cstdint>
#include <limits>

#include "core/tensor.h"

namespace tandem::kernels {

// The score a masked key gets: the lowest finite f32, i.e. torch.finfo(torch.float32).min, the
// value Hugging Face adds for padding. Adding it (HF) and replacing by it (here) give the same
// f32 result for any |score| < 1e31, so: a row with at least one kept key gives masked keys
// probability exactly 0; a row with every key masked is uniform over all keys, as in HF.
inline constexpr float kMaskedScore = std::numeric_limits<float>::lowest();

struct SoftmaxArgs {
  int64_t rows = 0, cols = 0;
  int64_t rows_per_batch = 1;  // H * Sq: rows sharing one mask row
  float scale = 1.0f;
  bool dropout = false;        // training with dropout_p > 0
  float dropout_p = 0.0f;
  uint64_t seed = 0, offset = 0;
};

void scale_mask_softmax_fwd_cpu(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                Tensor& out);
void scale_mask_softmax_bwd_cpu(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                Tensor& dx);
#ifdef TANDEM_WITH_CUDA
void scale_mask_softmax_fwd_cuda(const Tensor& x, const Tensor& mask, const SoftmaxArgs& a, Tensor& probs,
                                 Tensor& out);
void scale_mask_softmax_bwd_cuda(const Tensor& probs, const Tensor& dy, const Tensor& mask, const SoftmaxArgs& a,
                                 Tensor& dx);
#endif

}  // namespace tandem::kernels
