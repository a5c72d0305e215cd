// core/ops/elementwise/kernels.h: backend entry points for elementwise ops (internal).
//
// The op layer (core/ops/elementwise/elementwise.cpp) validates shapes and dtypes and records autograd; these
// functions only compute. `b` may be smaller than `a` when it broadcasts over leading dimensions
// (b.numel() divides a.numel(), b index = i % b.numel()): that covers per-channel bias in NHWC and
// per-feature bias in linear layers.
// An op is named by its functor: unary_op<fn::Relu>() is the op code of ReLU, its index in
// fn::UnaryOps (core/ops/elementwise/functors.h); visit.h turns the code back into the functor.
#pragma once
#include "core/ops/elementwise/functors.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct Unary {
  int index;  // position in fn::UnaryOps
};
struct Binary {
  int index;  // position in fn::BinaryOps
};
template <typename F>
constexpr Unary unary_op() {
  constexpr int i = fn::index_in<F>(fn::UnaryOps{});
  static_assert(i >= 0, "append the functor to fn::UnaryOps in core/ops/elementwise/functors.h");
  return Unary{i};
}
template <typename F>
constexpr Binary binary_op() {
  constexpr int i = fn::index_in<F>(fn::BinaryOps{});
  static_assert(i >= 0, "append the functor to fn::BinaryOps in core/ops/elementwise/functors.h");
  return Binary{i};
}

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
