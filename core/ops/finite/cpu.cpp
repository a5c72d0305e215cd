// core/ops/finite/cpu.cpp: the inf/NaN count on the CPU, a plain loop over the shared bit rule
// (core/ops/finite/functors.h). A span of at least cpu_parallel::kParallelMin elements is split
// into blocks between OpenMP's threads (core/ops/common/cpu/parallel.h), each counting its own;
// the counts are integers, so their sum is the same in any order and on any number of threads.
#include <atomic>
#include <cstring>

#include "core/ops/common/cpu/parallel.h"
#include "core/ops/finite/functors.h"
#include "core/ops/finite/kernels.h"

namespace tandem::kernels {

void count_nonfinite_cpu(DType dtype, const std::vector<FiniteSpan>& spans, int64_t* count) {
  fn::with_nonfinite_rule(dtype, [&](auto rule) {
    using Bits = typename decltype(rule)::Bits;
    std::atomic<int64_t> n{0};
    for (const FiniteSpan& s : spans) {
      const auto* p = static_cast<const unsigned char*>(s.data);
      // Blocks of 64 elements: whole cache lines of every dtype.
      cpu_parallel::for_blocks(s.numel, 64, cpu_parallel::threads_for(s.numel), [&](int64_t b, int64_t e) {
        int64_t k = 0;
        for (int64_t i = b; i < e; ++i) {
          Bits u;
          std::memcpy(&u, p + i * sizeof(Bits), sizeof(Bits));  // the element's bits, without aliasing a float
          k += rule(u);
        }
        n.fetch_add(k, std::memory_order_relaxed);
      });
    }
    count[0] += n.load();
  });
}

}  // namespace tandem::kernels
