// core/ops/attention/kernels.h: backend entry points for attention (internal): the fused
// scale-mask-softmax(-dropout) of the reference path, and the fused path (cuDNN SDPA).
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
// Statistics are f32 on CUDA and double on the CPU (the reference), whatever the dtype; the CPU's
// f32 path takes its exponentials in f32 (attention/cpu.cpp says why and how close).
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "core/ops/common/hd.h"
#include "core/random.h"
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

// ---- Fused path (AttentionBackend::Fused): cuDNN's SDPA, CUDA builds only ----
// One problem: q [B, H, Sq, D], k and v [B, H, Sk, D], o [B, H, Sq, D], each addressed through
// element strides {batch, head, position, dim} (dim stride 1); the backward writes dq, dk, dv with
// the strides of q, k, v and reads dO with o's. stats [B, H, Sq] f32 contiguous: cuDNN's per-row
// log-sum-exp, written by the forward for the backward.
// Padding (padded = true): lengths [2 * B] i32 on the device, lengths[0, B) = Sq (every query),
// lengths[B, 2B) = keys of each sequence (sdpa_lengths_cuda). Dropout (dropout_p > 0): rng [2]
// i64 on the device = {seed, first counter} (sdpa_rng_cuda). Semantics: attention.h.
struct SdpaArgs {
  int64_t b = 0, h = 0, sq = 0, sk = 0, d = 0;
  int64_t q_stride[3] = {0, 0, 0}, k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0}, o_stride[3] = {0, 0, 0};
  DType dtype = DType::BF16;
  float scale = 1.0f;
  float dropout_p = 0.0f;  // 0: no dropout node in the graph
  bool padded = false;
};

#ifdef TANDEM_WITH_CUDA
// "" when this build and the current GPU can run cuDNN's SDPA for a problem of this dtype and head
// dim (frontend compiled in, cuDNN >= 9.0, sm80+, f16/bf16, D % 8 == 0, D <= 128), else why not.
std::string sdpa_cudnn_unsupported(DType dtype, int64_t d);
// Builds (or finds in the cache) the forward and backward graphs; false with `why` set when cuDNN
// refuses the problem (nothing is written then). Both graphs are built here so that a problem the
// forward accepted never fails in the backward.
bool sdpa_cudnn_prepare(const SdpaArgs& a, std::string& why);
// Enqueue on the compute stream; sdpa_cudnn_prepare(a) must have returned true.
void sdpa_cudnn_fwd(const SdpaArgs& a, const void* q, const void* k, const void* v, const int32_t* lengths,
                    const int64_t* rng, void* o, float* stats);
void sdpa_cudnn_bwd(const SdpaArgs& a, const void* q, const void* k, const void* v, const void* o, const void* dout,
                    const float* stats, const int32_t* lengths, const int64_t* rng, void* dq, void* dk, void* dv);
// lengths [2 * B] (see above) from the i32 mask [B, Sk]: Sq, then the count of nonzero entries per row.
void sdpa_lengths_cuda(const Tensor& mask, int64_t sq, Tensor& lengths);
// rng [2] i64 = {seed, first counter} of `draw` (core/random.h), read from its device slot inside a
// captured CUDA graph: one eager-launch kernel, no host sync.
void sdpa_rng_cuda(const RngDraw& draw, Tensor& rng);
#endif

}  // namespace tandem::kernels
