// core/threads.cpp: the per-rank CPU thread count (see threads.h).
#include "core/threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#if TANDEM_HAVE_OPENMP
#include <omp.h>  // oneDNN (Debian's build) and the CPU batch norm run on OpenMP threads
#endif

namespace tandem {
namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// A positive count from the environment variable, or 0.
int env_count(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::max(0, std::atoi(v)) : 0;
}

std::mutex g_mu;
CpuThreads g_configured{0, 0, ""};

}  // namespace

CpuThreads cpu_threads_for(int ranks_on_node) {
  CpuThreads t;
  t.cores = usable_cores();
  const int ranks = std::max(1, ranks_on_node);
  const int share = std::max(1, t.cores / ranks);
  t.threads = share;
  t.reason = std::to_string(t.cores) + " core(s) / " + std::to_string(ranks) + " rank(s) on this node";
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const int asked = env_count(name);
    if (asked == 0) continue;
    t.threads = std::min(asked, share);
    t.reason = std::string(name) + "=" + std::to_string(asked);
    if (asked > share) t.reason += ", cut to the " + std::to_string(share) + " a rank's share of the cores allows";
    break;
  }
  return t;
}

void set_cpu_threads(const CpuThreads& t) {
  openblas_set_num_threads(t.threads);
#if TANDEM_HAVE_OPENMP
  omp_set_num_threads(t.threads);
#endif
}

CpuThreads configure_cpu_threads(int ranks_on_node) {
  CpuThreads t = cpu_threads_for(ranks_on_node);
  set_cpu_threads(t);
  std::lock_guard lock(g_mu);
  g_configured = t;
  return t;
}

CpuThreads configured_cpu_threads() {
  std::lock_guard lock(g_mu);
  return g_configured;
}

std::string describe(const CpuThreads& t) {
  if (t.threads == 0) return "CPU threads: the libraries' defaults";
  return std::to_string(t.threads) + " thread(s)/rank (" + t.reason + ")";
}

}  // namespace tandem
