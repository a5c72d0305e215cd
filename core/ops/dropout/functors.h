// core/ops/dropout/functors.h: the dropout mask rule, shared by the CPU and CUDA kernels.
//
// Element i is kept when the 24-bit uniform draw for counter (offset + i) is >= p, so the drop
// probability is p rounded to a multiple of 2^-24. Kept values are scaled by 1 / (1 - p) computed
// in T (float, or double for f64 gradient checks), dropped ones multiplied by 0 (NaN stays NaN).
// Both backends call this one function on the same (seed, offset + i), which is what makes their
// masks bit-identical.
// with_slot: inside a captured CUDA graph the seed and the base offset live in a device slot
// (core/graph_rng.h); a CUDA kernel resolves them once per thread, before its loop.
#pragma once
#include <cstdint>

#include "core/ops/common/rng.h"

namespace tandem::fn {

struct Dropout {
  float p;
  uint64_t seed, offset;
  TANDEM_HD bool keep(uint64_t i) const { return rng::uniform(seed, offset + i) >= p; }
  // x * mask * scale, as PyTorch computes it: a dropped NaN or inf gives NaN (x * 0), not 0, so
  // dropout cannot hide a non-finite activation (issue 20); a dropped finite x gives +-0.
  // p == 1 drops everything (uniform < 1), so the infinite scale is never used.
  template <typename T> TANDEM_HD T operator()(T x, uint64_t i) const {
    return x * (keep(i) ? T(1) / (T(1) - static_cast<T>(p)) : T(0));
  }
};

// D (Dropout or MaybeDropout) with the counters resolved: slot null (eager, every CPU call) returns
// d unchanged; otherwise seed = slot[0] and the offset, relative to the slot's base, becomes
// slot[1] + offset. Device memory: only CUDA kernels ever get a slot.
template <typename D> TANDEM_HD D with_slot(D d, const uint64_t* slot) {
  if (slot) {
    d.seed = slot[0];
    d.offset += slot[1];
  }
  return d;
}

}  // namespace tandem::fn
