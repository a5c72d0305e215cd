// core/ops/common/cpu/parallel.h: a CPU loop split between OpenMP's threads without changing its bits
// (internal).
//
// for_blocks(n, grain, threads, f) calls f(begin, end) on contiguous blocks of [0, n) made of whole
// `grain`s, one block per thread. A loop in which each output is computed by one call, with the
// arithmetic it has on one thread, gives the same bits on any number of threads: elementwise loops
// split over elements or rows, and a reduction only over its independent outputs (batch norm's
// per-channel sums: blocks of channels), never over the values one output sums.
// threads_for(numel) is how many threads a pass over numel values gets: the pool's size
// (omp_get_max_threads: what core/threads.cpp set), or 1 below kParallelMin or inside a region.
// The including file is compiled with -fopenmp (core/CMakeLists.txt says which files); without it
// (a ThreadSanitizer tree, a compiler without OpenMP) every loop runs on the calling thread. That is
// why everything here has internal linkage: its meaning depends on the including file's flags.
#pragma once
#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tandem::kernels::cpu_parallel {
namespace {

// A pass over fewer values stays on one thread. On a quiet machine the cost of a region is the fork
// and join of libgomp's warm pool, about 2 us on the 2-core machine of apps/results/2026-11-28-
// cpu-2core (an empty region), which a pass of 2^15 values (~8 us at 0.25 ns a value) would
// already repay. But where other processes share the cores, a region waits for a core for its
// second thread, milliseconds each time: there ResNet-18's 2-thread step ran 0.56x with every pass
// over 2^15 values forking (about 100 regions a step) (apps/results/2026-11-28-cpu-2core/bnrelu/
// README.md). So only the large passes fork: at 2^18 values ResNet-18 at 64 px, batch 32 keeps
// about 84 % of its BN work (the stem, layer1 and layer2) and its largest SGD updates parallel
// with about a third of the regions.
constexpr int64_t kParallelMin = int64_t{1} << 18;

// true when this file was compiled with OpenMP (the loops can run on several threads).
constexpr bool kHaveOpenMP =
#ifdef _OPENMP
    true;
#else
    false;
#endif

inline int threads_for(int64_t numel) {
#ifdef _OPENMP
  if (numel < kParallelMin || omp_in_parallel()) return 1;
  return std::max(1, omp_get_max_threads());
#else
  (void)numel;
  return 1;
#endif
}

// f must not throw (an exception cannot leave an OpenMP region).
template <typename F>
void for_blocks(int64_t n, int64_t grain, int threads, const F& f) {
  const int64_t grains = (n + grain - 1) / grain;
  if (threads <= 1 || grains <= 1) {
    f(int64_t{0}, n);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(threads, grains)))
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = grains * t / nt * grain, end = std::min(n, grains * (t + 1) / nt * grain);
    if (begin < end) f(begin, end);
  }
#endif
}

}  // namespace
}  // namespace tandem::kernels::cpu_parallel
