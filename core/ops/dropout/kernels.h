// core/ops/dropout/kernels.h: backend entry points for dropout (internal).
//
// No mask is stored: forward and backward both call dropout_apply with the same (seed, offset),
// which recomputes the mask from the counter-based RNG. That saves a mask tensor per dropout
// layer at the price of re-hashing, which is far cheaper than the memory traffic it saves.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tandem::kernels {

// dst[i] = keep(i) ? src[i] / (1 - p) : 0 with keep(i) = rng::uniform(seed, offset + i) >= p.
void dropout_apply_cpu(const Tensor& src, Tensor& dst, float p, uint64_t seed, uint64_t offset);
#ifdef TANDEM_WITH_CUDA
// slot: null, or (inside a CUDA graph capture) the device {seed, base} the kernel reads instead;
// then `offset` is relative to base and `seed` is unused (fn::with_slot).
void dropout_apply_cuda(const Tensor& src, Tensor& dst, float p, uint64_t seed, uint64_t offset,
                        const uint64_t* slot = nullptr);
#endif

}  // namespace tandem::kernels
