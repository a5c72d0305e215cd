// core/ops/kernels/elementwise.h: backend entry points for elementwise ops (internal).
//
// The op layer (core/ops/elementwise.cpp) validates shapes and dtypes and records autograd; these
// functions only compute. `b` may be smaller than `a` when it broadcasts over leading dimensions
// (b.numel() divides a.numel(), b index = i % b.numel()): that covers per-channel bias in NHWC and
// per-feature bias in linear layers.
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {

enum class Unary { Scale, AddScalar, Relu, Gelu, Square, Pow };
enum class Binary { Add, Sub, Mul, Axpby, ReluBackward, GeluBackward, PowBackward };

void unary_cpu(Unary op, const Tensor& x, Tensor& y, float alpha);
void binary_cpu(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta);
#ifdef TANDEM_WITH_CUDA
void unary_cuda(Unary op, const Tensor& x, Tensor& y, float alpha);
void binary_cuda(Binary op, const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta);
#endif

// dst[j] = sum over i of src[i * n + j] for a [m, n] view (the gradient of a trailing broadcast).
void sum_leading_cpu(const Tensor& src, Tensor& dst);
#ifdef TANDEM_WITH_CUDA
void sum_leading_cuda(const Tensor& src, Tensor& dst);
#endif

}  // namespace tandem::kernels
