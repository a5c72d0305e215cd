// apps/bench_ops_cpu_timing.h: what bench_ops' CPU library rows share (apps/bench_ops_cpu_conv.h,
// apps/bench_ops_cpu_gemm.h; included by apps/bench_ops.cpp only):
//   clock_ms / interleaved_median_ms  the timing: every way of doing one problem called in turn, so
//                                     load from other processes hits them alike; medians;
//   DirectPrimitive                   "oneDNN called directly": one primitive bound to its arguments
//                                     on its own engine and stream, built once; run() executes it
//                                     alone. The rows derive from it and only build the primitive.
#pragma once
#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <unordered_map>
#include <vector>

#if TANDEM_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tandem::cpu_bench {

// Milliseconds on the chosen clock: wall (steady) or the process's CPU time (all threads summed).
inline double clock_ms(bool process_cpu) {
  if (!process_cpu)
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Median milliseconds of each function, run interleaved: warm-up once each, then `reps` rounds of one
// call of each.
template <typename... F>
std::vector<double> interleaved_median_ms(int reps, bool process_cpu, F&&... fs) {
  std::vector<std::function<void()>> calls{fs...};
  for (auto& f : calls) f();
  std::vector<std::vector<double>> ms(calls.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < calls.size(); ++i) {
      const double t0 = clock_ms(process_cpu);
      calls[i]();
      ms[i].push_back(clock_ms(process_cpu) - t0);
    }
  std::vector<double> med;
  for (auto& v : ms) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

#if TANDEM_HAVE_ONEDNN
class DirectPrimitive {
 public:
  void run() {
    prim_.execute(stream_, args_);
    stream_.wait();
  }

 protected:
  DirectPrimitive() : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {}
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::primitive prim_;  // set by the derived row's constructor, with args_
  std::unordered_map<int, dnnl::memory> args_;
};
#endif

}  // namespace tandem::cpu_bench
