// core/ops/attention/attention.h: multi-head attention pieces for transformer encoders (BERT).
//
// Layout: q, k, v are [B, H, S, D] (batch, heads, positions, head dim), the layout of PyTorch's
// scaled_dot_product_attention. The key mask is Hugging Face's attention_mask: [B, Sk], any
// integer or float dtype, nonzero = attend, 0 = padding. A masked key's score is replaced by
// kernels::kMaskedScore = lowest finite f32 (= torch.finfo(float32).min, what HF adds), so padded
// keys get probability 0 and a row with every key padded is uniform, exactly as HF computes it.
// An undefined mask attends everywhere.
//
// attention() and attention_qkv() have two paths with one semantics (mask rule, scale):
//   - Reference: two batched GEMMs (core/ops/matmul/matmul.h) around the fused scale_mask_softmax(-dropout)
//     kernel, CPU and CUDA. Saves the [B, H, Sq, Sk] probabilities for backward. It defines the
//     semantics, dropout masks included (fn::Dropout's counters), and is what the tests trust.
//   - Fused: cuDNN's fused flash attention (SDPA), forward and backward, built as cuDNN frontend
//     graphs (core/ops/attention/cuda_cudnn_sdpa.cpp) and cached per shape, layout and options.
//     CUDA only. It reads q, k, v through strides where they lie (attention_qkv: in place in the
//     fused QKV projection's output) and writes the output and the input gradients through
//     strides (attention_qkv: [B, S, H * D] and one d(qkv) buffer), so no head transpose runs.
//     Memory O(B H S D) plus per-row f32 statistics; nothing [Sq, Sk] is stored.
//     What differs from the reference, by design (issue 17):
//       * dropout draws cuDNN's own Philox stream (seeded from the Generator: seed and first
//         counter as device values, so a captured CUDA graph draws new masks on every replay).
//         The same keep rate 1 - p, the same 1 / (1 - p) scaling, the same mask in forward and
//         backward - but not the reference's masks. With dropout 0 both compute the same function.
//       * padding is per-sequence key lengths (cuDNN's padding mask), computed on the device from
//         the mask (the number of nonzero entries per row; no host sync). That equals the
//         reference's mask only for a RIGHT-PADDED mask with at least one token per row (1...1 0...0),
//         which is what BERT's tokenizers produce. The caller states it: AttentionOptions::
//         mask_right_padded. Auto and Fused run cuDNN on a defined mask only when it is set; on
//         the CPU (where it costs nothing) a mask that breaks the promise is an error, so tests
//         catch a pipeline that pads otherwise. Every query row is computed (seq_len_q = Sq), so
//         padded query rows produce the reference's (ignored) outputs too.
// Backend policy:
//   - Fused runs when: the tensors are on CUDA, f16 or bf16, the head dim D is a multiple of 8 and
//     at most 128 (v's head dim equals D), Sk > 0, the mask is undefined or stated right-padded,
//     the build has cuDNN's frontend (TANDEM_HAVE_CUDNN_FRONTEND), cuDNN >= 9.0 and the GPU is
//     sm80 or newer, and cuDNN builds both the forward and the backward graph for the problem.
//     Asking for Fused where it cannot run is an error that says why.
//   - Auto = Fused wherever Fused runs (above), Reference otherwise: never an error. f32 on CUDA
//     keeps cuBLAS's TF32 GEMMs; the CPU keeps OpenBLAS.
// Why no flash kernel of our own any more: the SIMT kernel it replaced was 4.5-11x slower than the
// reference path at BERT's shapes on an H100 (apps/results/2026-11-22-h100/call12/bench_ops.log),
// and cuDNN's is faster than both; its only edge was bit-equal dropout masks, which issue 17 gives up.
//
// Adding an op like these takes: this header, core/ops/attention/attention.cpp (checks + autograd),
// core/ops/attention/kernels.h (backend entries), core/ops/attention/cpu.cpp and
// core/ops/attention/cuda*.{cu,cpp}, one line in core/ops/ops.h.
#pragma once
#include <array>
#include <string>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem::ops {

// Fused softmax(scale * x) over the last dim with the key mask and (in training) dropout applied
// to the probabilities. x [B, H, Sq, Sk]; mask [B, Sk] or undefined. Differentiable in x.
// Dropout follows core/ops/dropout/dropout.h: numel() counters are reserved from `gen` per training call.
Tensor scale_mask_softmax(const Tensor& x, const Tensor& mask, float scale, float dropout_p = 0.0f,
                          bool training = false, Generator& gen = default_generator());

enum class AttentionBackend {
  Auto,       // Fused wherever it runs, else Reference (policy above)
  Reference,  // GEMM + scale_mask_softmax + GEMM (CPU and CUDA)
  Fused,      // cuDNN's fused SDPA (CUDA f16/bf16); an error where it cannot run
};

struct AttentionOptions {
  float dropout_p = 0.0f;   // on the attention probabilities (BERT: 0.1); used only when training
  bool training = false;
  float scale = 0.0f;       // 0 means 1 / sqrt(D), the usual scaled dot product
  AttentionBackend backend = AttentionBackend::Auto;
  // The caller's promise that every row of the mask is right-padded with at least one token
  // (1...1 0...0, as BERT's tokenizers pad): lets Fused express it as per-sequence key lengths.
  // false (the default): a defined mask keeps attention on the Reference path. Checked on the CPU.
  bool mask_right_padded = false;
};

// "" when the Fused path can run attention on q, k, v (device, dtype, head dim, cuDNN's build,
// version and GPU) with this mask and options, else the reason (the policy above, in words).
std::string fused_attention_unsupported(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        const AttentionOptions& opt);

// How many CUDA attention / attention_qkv calls ran cuDNN's SDPA (fused) and how many that asked for
// it (Auto or Fused) ran the reference path instead (reference: the policy or cuDNN said no; the
// reason is in fused_attention_unsupported / the Fused error). For tests and the GPU session's table.
struct AttentionPathStats {
  int64_t fused = 0, reference = 0;
};
AttentionPathStats attention_path_stats();

// softmax(q k^T * scale, masked) v: q [B, H, Sq, D], k and v [B, H, Sk, D], mask [B, Sk] -> [B, H, Sq, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const AttentionOptions& opt = {}, Generator& gen = default_generator());

// Splits a fused QKV projection [B, S, 3 * heads * D] (columns: all of q, then k, then v, each
// head-major as nn.Linear(hidden, hidden) lays them out) into q, k, v [B, heads, S, D]. One copy
// each way; differentiable.
// Attention on the fused QKV projection's output as it lies: qkv [B, S, 3 * heads * D] (columns:
// all of q, then k, then v, each head-major, as split_qkv_heads reads them) -> [B, S, heads * D],
// the layout the output projection reads. The same function as
//   merge_heads(attention(split_qkv_heads(qkv, heads)..., mask, opt, gen))
// - and on the Reference path exactly that, the same counters and bits - with one backward that
// returns d(qkv) [B, S, 3 * heads * D]. On the Fused path q, k, v, the output and d(qkv) are all
// addressed through strides: no head split, no merge, no transpose.
Tensor attention_qkv(const Tensor& qkv, int64_t heads, const Tensor& mask, const AttentionOptions& opt = {},
                     Generator& gen = default_generator());

std::array<Tensor, 3> split_qkv_heads(const Tensor& qkv, int64_t heads);
// [B, H, S, D] -> [B, S, H * D] (the inverse of the head split for one tensor); differentiable.
Tensor merge_heads(const Tensor& x);

}  // namespace tandem::ops
