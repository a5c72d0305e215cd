// core/threads.h: how many threads this process's CPU kernels use (OpenBLAS's pool for GEMMs,
// OpenMP's for oneDNN's convolutions and the CPU batch norm), sized so that ranks on one machine
// never oversubscribe it.
//
// The rule: each rank gets cores / ranks-on-this-node threads (at least 1), where "cores" is what
// the process may run on (its affinity mask, so taskset and cgroup cpusets count). OMP_NUM_THREADS
// or OPENBLAS_NUM_THREADS, when set, asks for a count instead, but never for more than that share:
// a larger ask is cut to it, and the reason says so. Both pools are set to the same count, and
// the two libraries take turns (a GEMM or a conv at a time), so one rank never runs more than that.
#pragma once
#include <string>

namespace tandem {

struct CpuThreads {
  int threads = 1;     // per rank, both pools
  int cores = 1;       // usable by this process
  std::string reason;  // one phrase for the start-up line: "2 cores / 2 ranks", "OMP_NUM_THREADS=1", ...
};

// The count the rule above gives for `ranks_on_node` ranks (reads the environment; sets nothing).
CpuThreads cpu_threads_for(int ranks_on_node);
// Sets OpenBLAS's and OpenMP's pools (the calling thread's, which runs the ops) to t.threads.
void set_cpu_threads(const CpuThreads& t);
// cpu_threads_for then set_cpu_threads: what a trainer calls once, after dist::init.
CpuThreads configure_cpu_threads(int ranks_on_node);
// What the last configure_cpu_threads set (threads 0: never called, the libraries' own defaults),
// for the start-up line; and that line's words: "1 thread(s)/rank (2 core(s) / 2 rank(s) on this node)".
CpuThreads configured_cpu_threads();
std::string describe(const CpuThreads& t);

}  // namespace tandem
