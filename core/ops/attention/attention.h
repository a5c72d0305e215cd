// core/ops/attention/attention.h: multi-head attention pieces for transformer encoders (BERT).
//
// Layout: q, k, v are [B, H, S, D] (batch, heads, positions, head dim), the layout of PyTorch's
// scaled_dot_product_attention. The key mask is Hugging Face's attention_mask: [B, Sk], any
// integer or float dtype, nonzero = attend, 0 = padding. A masked key's score is replaced by
// kernels::kMaskedScore = lowest finite f32 (= torch.finfo(float32).min, what HF adds), so padded
// keys get probability 0 and a row with every key padded is uniform, exactly as HF computes it.
// An undefined mask attends everywhere.
//
// attention() has two paths with one semantics (mask rule, fully padded rows, dropout masks):
//   - Reference: two batched GEMMs (core/ops/matmul/matmul.h) around the fused scale_mask_softmax(-dropout)
//     kernel, CPU and CUDA. Saves the [B, H, Sq, Sk] probabilities for backward.
//   - Fused: flash attention (FlashAttention-2's tiled online softmax; backward recomputes the
//     probabilities from two f32 numbers per query row). Memory O(B H S D): nothing [Sq, Sk] is
//     stored. CUDA: our own SIMT kernel, f32 accumulation, no tensor cores yet, deterministic
//     (core/ops/attention/cuda_flash.cu says why not cuDNN's SDPA: its dropout RNG and length-only
//     padding cannot match this path's masks). CPU: a twin of the kernel's blocking in f32 (f64
//     for f64), so the algorithm is tested where no GPU is; it is slow and Auto never picks it.
//     Dropout draws the very counters the reference would (same generator reservation, same
//     index (b, h, i, j)), so the two paths drop the same probabilities and stay parity partners
//     in training too.
// Backend policy:
//   - Fused runs when: head dim D is a multiple of 8 and at most 128, v's head dim equals D,
//     Sk > 0, q/k/v share a dtype, and that dtype is f32/f16/bf16 on CUDA or f32/f64 on the CPU.
//     Asking for Fused where it cannot run is an error that says why.
//   - Auto = Fused for CUDA f16/bf16 inputs that Fused supports AND whose [B, H, Sq, Sk]
//     probabilities would take at least kAutoFusedMinBytes; Reference otherwise. Why the size rule:
//     on the H100 our SIMT flash kernel is 4.5-11x slower than the reference path's tensor-core
//     GEMMs at BERT's shapes (apps/results/2026-11-22-h100/call12/bench_ops.log: BERT-base seq 128
//     fwd+bwd 1.16 vs 0.17 ms; BERT-large seq 512 5.7 vs 0.52 ms), so Auto takes it only where the
//     reference path's saved probabilities would cost more memory than a model can spare (long
//     sequences). f32 on CUDA keeps cuBLAS's TF32 GEMMs; the CPU keeps OpenBLAS.
//
// Adding an op like these takes: this header, core/ops/attention/attention.cpp (checks + autograd),
// core/ops/attention/kernels.h (backend entries), core/ops/attention/cpu.cpp and
// core/ops/attention/cuda.cu (the flash path: cpu/ and cuda/flash_attention.*), one line in
// core/ops/ops.h.
#pragma once
#include <array>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem::ops {

// Fused softmax(scale * x) over the last dim with the key mask and (in training) dropout applied
// to the probabilities. x [B, H, Sq, Sk]; mask [B, Sk] or undefined. Differentiable in x.
// Dropout follows core/ops/dropout/dropout.h: numel() counters are reserved from `gen` per training call.
Tensor scale_mask_softmax(const Tensor& x, const Tensor& mask, float scale, float dropout_p = 0.0f,
                          bool training = false, Generator& gen = default_generator());

enum class AttentionBackend {
  Auto,       // Fused for large CUDA f16/bf16 problems where supported, else Reference (policy above)
  Reference,  // GEMM + scale_mask_softmax + GEMM (CPU and CUDA)
  Fused,      // flash attention (CUDA kernel; CPU twin); an error where unsupported
};

struct AttentionOptions {
  float dropout_p = 0.0f;   // on the attention probabilities (BERT: 0.1); used only when training
  bool training = false;
  float scale = 0.0f;       // 0 means 1 / sqrt(D), the usual scaled dot product
  AttentionBackend backend = AttentionBackend::Auto;
};

// Auto's size rule (policy above): 512 MiB of probabilities, e.g. batch 8, 16 heads, Sq = Sk = 1449
// in 16-bit (1448 is just under: 8 * 16 * 1448^2 * 2 bytes = 511.9 MiB) - one layer's, and a
// 24-layer model saves 24 of them.
inline constexpr int64_t kAutoFusedMinBytes = int64_t{512} << 20;
// Auto's choice for inputs on CUDA (or not) of `dtype` whose probabilities take `prob_bytes`; the
// caller also checks that Fused supports them.
bool auto_prefers_fused(bool cuda, DType dtype, int64_t prob_bytes);

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
