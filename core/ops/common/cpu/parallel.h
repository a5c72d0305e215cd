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

// A pass over fewer values stays on one thread. Forking and joining libgomp's warm pool costs about
// 2 us on the 2-core machine of apps/results/2026-11-28-cpu-2core (an empty parallel region,
// measured); a streaming pass costs about 0.2-0.3 ns a value there, so at 2^15 values it takes
// ~8 us and halving it saves ~4 us, twice the fork. Every BN of ResNet-18 at 64 px, batch 32 is
// above it, and so are its conv weights' SGD updates (but not its biases' and BN parameters').
constexpr int64_t kParallelMin = int64_t{1} << 15;

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
