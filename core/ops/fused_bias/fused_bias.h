// core/ops/fused_bias/fused_bias.h: the transformer's GEMM tails, each one memory pass instead of two or three.
//
//   bias_gelu(x, bias)                                    y = gelu(x + bias)        (erf GELU)
//   bias_dropout_add(x, bias, residual, p, training, gen) y = residual + dropout(x + bias)
//
// x [..., C] is the output of a bias-free GEMM (ops::linear(h, w) with no bias), bias is [C]
// (broadcast over the leading dims), residual has x's shape; all share one dtype and device.
//
// Why one elementwise kernel after a bias-free GEMM, and not a cuBLASLt epilogue:
//   cuBLASLt's GELU epilogues (GELU_BIAS, GELU_AUX_BIAS, DGELU_BGRAD) compute the tanh
//   approximation of GELU (PyTorch only routes gelu(approximate="tanh") to them). BERT's GELU is
//   the erf form x * Phi(x), and Hugging Face's BertForMaskedLM is the reference we match, so the
//   activation cannot live in the epilogue. Counting passes over the [M, C] activation:
//     linear with the BIAS epilogue, then gelu:  GEMM writes z (1), gelu reads z, writes y (2)  = 3
//     bias-free GEMM, then bias_gelu:            GEMM writes z0 (1), one read + one write (2)   = 3
//   Both are the minimum for a forward that keeps erf semantics and saves the pre-activation for
//   backward. The second never depends on whether cuBLASLt takes the BIAS epilogue for a shape (a
//   refusal costs a separate add: 2 more passes), and it lets the backward fuse the bias gradient
//   with the GELU derivative: dz = dy * gelu'(x + b) and db = column sums of dz come out of ONE
//   kernel (read dy, x; write dz), the same 3 passes as the unfused gelu backward followed by the
//   BGRADB epilogue. What the fused op saves over the unfused *op sequence* (add, gelu) is 2 passes
//   forward and 1 backward; bench_ops prints both.
//   bias_dropout_add replaces dropout(linear(h) + b) followed by add(., residual): 3 passes
//   (read x, residual; write y) instead of 5, and in backward dx = mask * dy / (1 - p) and db come
//   from one kernel, while d residual is dy itself (no copy).
//
// Saved for backward: bias_gelu saves x (the pre-bias GEMM output) and bias, and recomputes
// x + bias in its backward kernel (one add per element, no extra tensor). bias_dropout_add saves
// NOTHING: its mask is regenerated from (generator seed, offset), exactly as ops::dropout does.
// Dropout determinism: the op reserves numel() counters from `gen` and keeps element i where
// rng::uniform(seed, offset + i) >= p (fn::Dropout, core/ops/dropout/functors.h), which is the
// rule and the counter use of ops::dropout. So for the same generator state it drops the same
// elements as dropout(x + bias) on either backend, and a training run with the fused op draws the
// same masks, step for step, as the unfused sequence. Values agree to float rounding only: the
// unfused path rounds x + bias and the dropout output to the dtype in between.
// Eval mode or p == 0: y = residual + x + bias and the generator does not advance (as dropout).
// f64 runs on the CPU only (gradient checks); 16-bit tensors compute in f32 and round once.
//
// The GEMM and its tail as one op (issue 17.3: no separate column-sum pass for a Linear's bias):
//   linear_bias_gelu(h, w, b)                       = bias_gelu(linear(h, w), b)
//   linear_bias_dropout_add(h, w, b, r, p, ...)     = bias_dropout_add(linear(h, w), b, r, p, ...)
// Forward: the same two launches as the pair (bias-free GEMM, then the tail's map). Backward: the
// tail's map only (dz = dy * gelu'(z + b), or the dropout mask's dz) - no column reduction - then
// linear_grads (core/ops/matmul/matmul.h): dh = dz w, and dw = dz^T h with the bias gradient
// db = column sums of dz from the same GEMM's BGRADB epilogue. Where cuBLASLt refuses the epilogue
// (matmul/cuda.cpp falls back) and on the CPU, db is a separate column sum of dz, which is the same
// value. What differs from the pair: db sums dz as stored (rounded to its dtype), where the pair's
// fused kernel summed the f32 values before that rounding - for f32/f64 identical up to summation
// order, for bf16/f16 within the 16-bit rounding of each addend (PyTorch's bias gradient is the
// sum of the stored dz too). The erf GELU stays in tandem's map: cuBLASLt's DGELU_BGRAD epilogue
// is the tanh form. Saved: h, w, z (pre-bias) and b, as the pair saves.
#pragma once
#include "core/random.h"
#include "core/tensor.h"

namespace tandem::ops {

Tensor bias_gelu(const Tensor& x, const Tensor& bias);
Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, float p, bool training,
                        Generator& gen = default_generator());
// h [..., in], w [out, in], bias [out]; residual [..., out] (see the comment above).
Tensor linear_bias_gelu(const Tensor& h, const Tensor& w, const Tensor& bias);
Tensor linear_bias_dropout_add(const Tensor& h, const Tensor& w, const Tensor& bias, const Tensor& residual, float p,
                               bool training, Generator& gen = default_generator());

}  // namespace tandem::ops
