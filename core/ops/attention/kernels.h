// core/ops/attention/kernels.h: backend entry points for attention (internal): the fused
// scale-mask-softmax(-dropout) of the reference path, and the flash (tiled, online-softmax) path.
//
// ---- Reference path ----
// Scores are viewed as rows of `cols` keys: x [rows, cols] with rows = B * H * Sq. Row r belongs to
// batch entry b = r / rows_per_batch, whose key mask is mask[b, 0 .. cols) (i32, nonzero = keep;
// undefined = keep everything). Forward, per row:
//   z_j   = masked_j ? kMaskedScore : scale * x_j
//   p_j   = exp(z_j - max z) / sum exp(z - max z)                     (written to `probs`)
//   y_j   = dropout ? keep_j * p_j / (1 - dropout_p) : p_j            (written to `out`)
// with keep_j = fn::Dropout{dropout_p, seed, offset}.keep(r * cols + j), the same counter rule as
// core/ops/dropout/dropout.h, so the CPU and CUDA masks are bit-identical. `out` may alias `probs` when
// there is no dropout. Backward (probs saved from the forward, the mask recomputed):
//   g_j   = dropout ? keep_j * dy_j / (1 - dropout_p) : dy_j
//   dx_j  = masked_j ? 0 : scale * p_j * (g_j - sum_k g_k p_k)
// Masked scores get an exactly zero gradient: the forward does not depend on them (they are
// replaced, not added to), so 0 is their true derivative.
// Statistics are f32 on CUDA and double on the CPU (the reference), whatever the dtype.
#pragma once
#include <cstdint>
#include <limits>

#include "core/ops/common/hd.h"
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

// ---- Flash path (AttentionBackend::Fused) ----
// q [BH, Sq, D], k and v [BH, Sk, D] (BH = B * H, contiguous), mask [B, Sk] i32 or undefined;
// query row `row` = bh * Sq + i. Same semantics as the reference path: z = logit(q.k, ...) below,
// p = softmax_j(z), out = sum_j y_j v_j with y_j = p_j, or keep_j * p_j / (1 - dropout_p) where
// keep_j = fn::Dropout{dropout_p, seed, offset}.keep(row * Sk + j): the reference's counter for the
// same (b, h, i, j), so both paths drop the same probabilities. The forward saves, per query row,
// stats[row] = {m, 1 / l}: the row max of z and the inverse of sum_j exp(z_j - m). Backward
// recomputes p_j = exp(z_j - m) / l from them. Two numbers, not FlashAttention's single logsumexp
// m + log l: a row whose keys are all padded has m = kMaskedScore = -3.4e38, where m + log l
// rounds back to m and would lose l (p would come out 1 instead of 1 / Sk).
// Accumulation is f32 (f64 for f64 CPU tensors, for gradient checks); stats are in that type.
struct FlashArgs {
  int64_t bh = 0, heads = 1, sq = 0, sk = 0, d = 0;  // heads: to find a row's batch entry b = bh / heads
  float scale = 1.0f;
  bool dropout = false;
  float dropout_p = 0.0f;
  uint64_t seed = 0, offset = 0;
};

namespace flash {
// Blocking shared by the CUDA kernels and their CPU twin (core/ops/attention/cpu_flash.cpp).
inline constexpr int kTile = 32;         // keys per tile (forward, dQ), queries per tile (dK/dV): one per lane
inline constexpr int kWarps = 4;         // warps per block (128 threads)
inline constexpr int kRowsPerWarp = 4;   // forward and dQ: query rows each warp owns
inline constexpr int kKeysPerWarp = 4;   // dK/dV: keys each warp owns
inline constexpr int kBlockRows = kWarps * kRowsPerWarp;  // 16 query rows per forward/dQ block
inline constexpr int kBlockKeys = kWarps * kKeysPerWarp;  // 16 keys per dK/dV block
inline constexpr int kMaxHeadDim = 128;  // registers per lane hold ceil(D / 32) <= 4 columns

// The logit of a kept key, or kMaskedScore for a padded one (replaced, not added: see above).
template <typename A> TANDEM_HD A logit(A dot, A scale, bool masked) {
  return masked ? static_cast<A>(kMaskedScore) : scale * dot;
}
// d(loss)/d(q.k) for one (query, key): the softmax backward times the scale; exactly 0 for a
// padded key (the forward does not depend on its score). dp is the gradient reaching p (after
// undoing dropout), d_row = sum_j p_j dp_j = dot(dO_row, O_row).
template <typename A> TANDEM_HD A dscore(A p, A dp, A d_row, A scale, bool masked) {
  return masked ? A(0) : scale * p * (dp - d_row);
}
}  // namespace flash

void flash_attention_fwd_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const FlashArgs& a, Tensor& out, Tensor& stats);
void flash_attention_bwd_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& stats, const Tensor& mask, const FlashArgs& a, Tensor& dq, Tensor& dk,
                             Tensor& dv);
#ifdef TANDEM_WITH_CUDA
void flash_attention_fwd_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const FlashArgs& a, Tensor& out, Tensor& stats);
void flash_attention_bwd_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& stats, const Tensor& mask, const FlashArgs& a,
                              Tensor& dq, Tensor& dk, Tensor& dv);
#endif

}  // namespace tandem::kernels
