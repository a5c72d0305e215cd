// core/ops/elementwise/elementwise.h: differentiable elementwise ops.
//
// Binary ops take two tensors of the same dtype and device. `b` may also broadcast along trailing
// dimensions: its shape must equal the trailing dims of `a` (a bias of shape [C] added to NHWC
// activations [N, H, W, C] or to linear outputs [N, C]). The gradient for a broadcast input is the
// sum over the leading dimensions.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float alpha);        // alpha * x
Tensor add_scalar(const Tensor& x, float alpha);   // x + alpha
Tensor axpby(const Tensor& a, const Tensor& b, float alpha, float beta);  // alpha*a + beta*b, same shapes
Tensor relu(const Tensor& x);
// ReLU in place: overwrites x's data and rebinds x to the result, with a node that saves only the
// output (ReLU's backward needs just its sign), so no activation-sized buffer is allocated.
// Autograd has no version counters, so the caller promises that no recorded op saved x's data
// for its backward. That holds for the output of conv2d, linear, batch_norm and add (they save
// their inputs, or nothing); it does not hold for a tensor that mul, gelu, square, pow or
// layer_norm took as an input, nor for a tensor used twice. A leaf that requires grad is refused.
void relu_(Tensor& x);
Tensor gelu(const Tensor& x);                      // exact erf form
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, float exponent);       // x^exponent (rsqrt: -0.5, reciprocal: -1)

// In place, not recorded by autograd (optimizers, gradient accumulation): a += b, a *= alpha.
void add_(Tensor& a, const Tensor& b);
void scale_(Tensor& a, float alpha);
// a = alpha*a + beta*b in place.
void axpby_(Tensor& a, const Tensor& b, float alpha, float beta);

// Sum of a [..., C] tensor over all leading dims -> [C] (or whatever trailing shape `like` has).
Tensor sum_to_trailing(const Tensor& g, const Shape& trailing);

}  // namespace tandem::ops
