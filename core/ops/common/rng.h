// core/ops/common/rng.h: a counter-based random number generator usable on host and device.
//
// Value i of a stream is a pure function of (seed, i): a 64-bit mix (SplitMix64's finaliser, which
// passes BigCrush as a counter hash) of seed and index. That makes random init identical on every
// rank and on both backends, and lets dropout draw its mask on CPU and GPU bit-identically without
// storing generator state per thread.
#pragma once
#include <cstdint>

#include "core/ops/common/hd.h"

namespace tandem::rng {

TANDEM_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits (exactly representable in float).
TANDEM_HD float uniform(uint64_t seed, uint64_t index) {
  uint64_t r = mix64(mix64(seed) + index * 0x9e3779b97f4a7c15ULL);
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) with 53 bits, for f64 init.
TANDEM_HD double uniform_f64(uint64_t seed, uint64_t index) {
  uint64_t r = mix64(mix64(seed) + index * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace tandem::rng
