// core/ops/finite/cpu.cpp: the inf/NaN count on the CPU, a plain loop over the shared bit rule
// (core/ops/finite/functors.h).
#include <cstring>

#include "core/ops/finite/functors.h"
#include "core/ops/finite/kernels.h"

namespace tandem::kernels {

void count_nonfinite_cpu(DType dtype, const std::vector<FiniteSpan>& spans, int64_t* count) {
  fn::with_nonfinite_rule(dtype, [&](auto rule) {
    using Bits = typename decltype(rule)::Bits;
    int64_t n = 0;
    for (const FiniteSpan& s : spans) {
      const auto* p = static_cast<const unsigned char*>(s.data);
      for (int64_t i = 0; i < s.numel; ++i) {
        Bits u;
        std::memcpy(&u, p + i * sizeof(Bits), sizeof(Bits));  // the element's bits, without aliasing a float
        n += rule(u);
      }
    }
    count[0] += n;
  });
}

}  // namespace tandem::kernels
