// tests/support/collective_values.h: rank-dependent inputs whose collective results have closed
// forms, used by the collective bodies of tests/support/collective_checks.h (CPU and GPU).
//
// Rank r holds (r + 1) * k(i) at element i, with k(i) = i % 5 + 1 in 1..5. Over n ranks:
//   sum = k(i) * n (n + 1) / 2,   avg = k(i) * (n + 1) / 2,   chunk q of an all_gather = (q + 1) k(i).
// For n <= 8 every such value is an integer or a half below 2^8, exact in f32, f16 and bf16 (bf16
// has an 8-bit significand), and so is every partial sum, in any order: results are compared for
// equality, not within a tolerance.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace tandem::testing {

inline float k_of(int64_t i) { return static_cast<float>(i % 5 + 1); }

inline Tensor rank_tensor(int64_t n, DType t, int rank, Device device = Device::cpu()) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (rank + 1) * k_of(i);
  return Tensor::from_vector(v, {n}, t, device);
}

}  // namespace tandem::testing
