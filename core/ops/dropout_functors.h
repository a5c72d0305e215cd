// core/ops/dropout_functors.h: the dropout mask rule, shared by the CPU and CUDA kernels.
//
// Element i is kept when the 24-bit uniform draw for counter (offset + i) is >= p, so the drop
// probability is p rounded to a multiple of 2^-24. Kept values are scaled by 1 / (1 - p) computed
// in T (float, or double for f64 gradient checks). Both backends call this one function on the same
// (seed, offset + i), which is what makes their masks bit-identical.
#pragma once
#include <cstdint>

#include "core/ops/rng.h"

namespace tandem::fn {

struct Dropout {
  float p;
  uint64_t seed, offset;
  TANDEM_HD bool keep(uint64_t i) const { return rng::uniform(seed, offset + i) >= p; }
  template <typename T> TANDEM_HD T operator()(T x, uint64_t i) const {
    // p == 1 drops everything (uniform < 1), so the infinite scale is never used.
    return keep(i) ? x * (T(1) / (T(1) - static_cast<T>(p))) : T(0);
  }
};

}  // namespace tandem::fn
