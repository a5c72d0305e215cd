// core/ops/copy/cpu.cpp: casts between every pair of dtypes, and fills, on the CPU.
#include <cstdint>
#include <utility>

#include "core/ops/common/dispatch.h"
#include "core/ops/copy/kernels.h"

namespace tandem::kernels {
namespace {

// Every value passes through double, which holds f32, f16, bf16, i32 exactly (and i64 up to 2^53).
template <typename T> double widen(T v) { return static_cast<double>(v); }
template <> double widen<Half>(Half v) { return static_cast<float>(v); }
template <> double widen<BFloat16>(BFloat16 v) { return static_cast<float>(v); }
template <typename T> T narrow(double v) { return static_cast<T>(v); }
template <> Half narrow<Half>(double v) { return Half(static_cast<float>(v)); }
template <> BFloat16 narrow<BFloat16>(double v) { return BFloat16(static_cast<float>(v)); }

template <typename F>
void by_dtype(DType t, F&& f) {
  with_element_type<Half, BFloat16, /*kHasF64=*/true>(t, std::forward<F>(f));
}

}  // namespace

void cast_cpu(const Tensor& x, Tensor& y) {
  int64_t n = x.numel();
  by_dtype(x.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    by_dtype(y.dtype(), [&](auto dst_tag) {
      using D = decltype(dst_tag);
      const S* s = static_cast<const S*>(x.data_ptr());
      D* d = static_cast<D*>(y.data_ptr());
      if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float>) {
        for (int64_t i = 0; i < n; ++i) d[i] = s[i];
      } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
        // Round once, from f32 (double->f32->f16 could double-round, but f32 sources are exact in f32).
        for (int64_t i = 0; i < n; ++i) d[i] = D(static_cast<float>(widen(s[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = narrow<D>(widen(s[i]));
      }
    });
  });
}

void fill_cpu(Tensor& t, double value) {
  int64_t n = t.numel();
  by_dtype(t.dtype(), [&](auto tag) {
    using D = decltype(tag);
    D v = narrow<D>(value);
    D* d = static_cast<D*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) d[i] = v;
  });
}

}  // namespace tandem::kernels
