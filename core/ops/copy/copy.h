// core/ops/copy/copy.h: dtype casts, device transfers and fills.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

// Differentiable cast: the gradient is cast back to the input's dtype.
Tensor cast(const Tensor& x, DType to);
// Differentiable device copy: the gradient is copied back.
Tensor to_device(const Tensor& x, Device d);
// Raw cast with no autograd (all dtype pairs, on one device). Floats round to nearest even; float
// to int truncates toward zero.
Tensor cast_raw(const Tensor& x, DType to);
void fill_(Tensor& t, double value);

}  // namespace tandem::ops
