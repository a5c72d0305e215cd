// core/ops/finite/functors.h: how inf and NaN are recognised and ranked, shared by the CPU loops
// and the CUDA kernels (internal).
//
// Recognising: a value is non-finite (inf or NaN) exactly when its exponent field is all ones, in
// every IEEE format tandem stores (f16, bf16, f32, f64). The test runs on the raw bits, so one rule
// serves both backends and all four dtypes: no 16-bit arithmetic on the CPU, f64 on CUDA too.
// Ranking: torch.argmax / torch.topk treat NaN as larger than every number (and +inf); ties go to
// the lower index, as torch.argmax documents ("the indices of the first maximal value").
#pragma once
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"
#include "core/ops/common/hd.h"

namespace tandem::fn {

// Bits: the unsigned integer as wide as the element; kExponent: its exponent field.
template <typename Bits_, Bits_ kExponent>
struct NonfiniteBits {
  using Bits = Bits_;
  TANDEM_HD bool operator()(Bits u) const { return (u & kExponent) == kExponent; }
};
using NonfiniteF16 = NonfiniteBits<uint16_t, 0x7c00u>;    // 5 exponent bits
using NonfiniteBF16 = NonfiniteBits<uint16_t, 0x7f80u>;   // 8 exponent bits (f32's, truncated)
using NonfiniteF32 = NonfiniteBits<uint32_t, 0x7f800000u>;
using NonfiniteF64 = NonfiniteBits<uint64_t, 0x7ff0000000000000ull>;

// Calls f(rule) with the rule for a floating dtype (host code: the dispatch happens before launch).
template <typename F>
decltype(auto) with_nonfinite_rule(DType t, F&& f) {
  switch (t) {
    case DType::F16: return f(NonfiniteF16{});
    case DType::BF16: return f(NonfiniteBF16{});
    case DType::F32: return f(NonfiniteF32{});
    case DType::F64: return f(NonfiniteF64{});
    default: TANDEM_THROW("non-finite check: ", dtype_name(t), " is not a floating dtype (integers are always finite)");
  }
}

// Whether class j (logit v) ranks above the label's class (logit ref) in torch.argmax's order:
// a larger value, NaN above everything (NaNs tie with each other), and on a tie the lower index.
// So exactly `rank` classes rank above the label, and it is in the top k when rank < k.
template <typename T>
TANDEM_HD bool ranks_above(T v, int64_t j, T ref, int64_t label) {
  const bool v_nan = v != v, ref_nan = ref != ref;
  if (v_nan || ref_nan) return v_nan && (!ref_nan || j < label);
  return v > ref || (v == ref && j < label);
}

}  // namespace tandem::fn
