// core/ops/attention.h: multi-head attention pieces for transformer encoders (BERT).
//
// Layout: q, k, v are [B, H, S, D] (batch, heads, positions, head dim), the layout of PyTorch's
// scaled_dot_product_attention. The key mask is Hugging Face's attention_mask: [B, Sk], any
// integer or float dtype, nonzero = attend, 0 = padding. A masked key's score is replaced by
// kernels::kMaskedScore = lowest finite f32 (= torch.finfo(float32).min, what HF adds), so padded
// keys get probability 0 and a row with every key padded is uniform, exactly as HF computes it.
// An undefined mask attends everywhere.
//
// attention() runs the reference path: two batched GEMMs (core/ops/matmul.h) around the fused
// scale_mask_softmax(-dropout) kernel, on the CPU and on CUDA, with the same semantics and the
// same dropout masks (counter RNG, core/ops/rng.h). It saves the [B, H, Sq, Sk] probabilities for
// backward. AttentionBackend::Fused (a flash-attention path that never materialises them) is not
// implemented yet: asking for it explicitly is an error that says so; Auto picks Reference.
//
// Adding an op like these takes: this header, core/ops/attention.cpp (checks + autograd),
// core/ops/kernels/attention.h (backend entries), core/ops/cpu/attention.cpp and
// core/ops/cuda/attention.cu, one line in core/ops/ops.h.
#pragma once
#include <array>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem::ops {

// Fused softmax(scale * x) over the last dim with the key mask and (in training) dropout applied
// to the probabilities. x [B, H, Sq, Sk]; mask [B, Sk] or undefined. Differentiable in x.
// Dropout follows core/ops/dropout.h: numel() counters are reserved from `gen` per training call.
Tensor scale_mask_softmax(const Tensor& x, const Tensor& mask, float scale, float dropout_p = 0.0f,
                          bool training = false, Generator& gen = default_generator());

enum class AttentionBackend {
  Auto,       // the fastest available for the inputs; today always Reference
  Reference,  // GEMM + scale_mask_softmax + GEMM (CPU and CUDA)
  Fused,      // flash attention (not implemented yet: an error)
};

struct AttentionOptions {
  float dropout_p = 0.0f;   // on the attention probabilities (BERT: 0.1); used only when training
  bool training = false;
  float scale = 0.0f;       // 0 means 1 / sqrt(D), the usual scaled dot product
  AttentionBackend backend = AttentionBackend::Auto;
};

// softmax(q k^T * scale, masked) v: q [B, H, Sq, D], k and v [B, H, Sk, D], mask [B, Sk] -> [B, H, Sq, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const AttentionOptions& opt = {}, Generator& gen = default_generator());

// Splits a fused QKV projection [B, S, 3 * heads * D] (columns: all of q, then k, then v, each
// head-major as nn.Linear(hidden, hidden) lays them out) into q, k, v [B, heads, S, D]. One copy
// each way; differentiable.
std::array<Tensor, 3> split_qkv_heads(const Tensor& qkv, int64_t heads);
// [B, H, S, D] -> [B, S, H * D] (the inverse of the head split for one tensor); differentiable.
Tensor merge_heads(const Tensor& x);

}  // namespace tandem::ops
