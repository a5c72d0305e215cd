// core/ops/dropout/dropout.h: inverted dropout. Training: y = x * mask / (1 - p), mask drawn from the
// counter-based RNG (core/ops/common/rng.h) keyed by (generator seed, offset + element index), so the CPU
// and CUDA masks are bit-identical. Eval or p == 0: identity.
#pragma once
#include "core/random.h"
#include "core/tensor.h"

namespace tandem::ops {

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen = default_generator());

}  // namespace tandem::ops
