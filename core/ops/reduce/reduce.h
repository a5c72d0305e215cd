// core/ops/reduce/reduce.h: full reductions to a scalar (shape [1]). Accumulation is in f32 or wider.
#pragma once
#include "core/tensor.h"

namespace tandem::ops {

Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace tandem::ops
