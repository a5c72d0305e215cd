// dist/transport/host_reduce.h: what the MPI and the thread communicators compute on the host alike.
//
// HostMark: a moment on the host's steady clock (profile::now_us), the Mark of both backends.
// add_into: the sum of one addition step, b[i] = a[i] + b[i]; 16-bit floats are widened to f32,
// added and rounded back at every step (MPI's user op; NCCL rounds per step the same way).
// divide: ReduceOp::Avg after the sum; f32 and f64 by multiplying with 1/n, 16-bit in f32.
#pragma once
#include <type_traits>

#include "core/ops/elementwise/elementwise.h"
#include "core/profile.h"
#include "dist/communicator.h"

namespace tandem::dist {

struct HostMark final : Mark {
  double us;
  explicit HostMark(double u = profile::now_us()) : us(u) {}
  double us_since(const Mark& origin) const override { return us - static_cast<const HostMark&>(origin).us; }
};

template <typename T>
void add_into(const T* a, T* b, int64_t n) {
  using Wide = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t i = 0; i < n; ++i) b[i] = T(static_cast<Wide>(a[i]) + static_cast<Wide>(b[i]));
}

inline void divide(Tensor& t, int n) {
  if (t.dtype() == DType::F32 || t.dtype() == DType::F64) return ops::scale_(t, 1.0f / static_cast<float>(n));
  auto each = [&](auto* p) {
    using H = std::remove_pointer_t<decltype(p)>;
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = H(static_cast<float>(p[i]) / static_cast<float>(n));
  };
  if (t.dtype() == DType::F16) each(t.data<Half>());
  else each(t.data<BFloat16>());
}

}  // namespace tandem::dist
