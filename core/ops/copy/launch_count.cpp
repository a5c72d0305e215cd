// core/ops/copy/launch_count.cpp: the two process-wide launch counters (see launch_count.h).
#include "core/ops/copy/launch_count.h"

namespace tandem::ops {

int64_t LaunchCounter::total() const { return total(snapshot()); }

void LaunchCounter::reset() {
  for (auto& c : n_) c.store(0, std::memory_order_relaxed);
}

LaunchCounter::Counts LaunchCounter::snapshot() const {
  Counts out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = n_[i].load(std::memory_order_relaxed);
  return out;
}

LaunchCounter::Counts LaunchCounter::minus(const Counts& after, const Counts& before) {
  Counts out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = after[i] - before[i];
  return out;
}

int64_t LaunchCounter::total(const Counts& c) {
  int64_t n = 0;
  for (int64_t v : c) n += v;
  return n;
}

std::string LaunchCounter::summary(const Counts& c) {
  std::string out;
  for (int a = 0; a < kTypes; ++a)
    for (int b = 0; b < kTypes; ++b) {
      const int64_t n = c[idx(static_cast<DType>(a), static_cast<DType>(b))];
      if (n == 0) continue;
      out += (out.empty() ? "" : ", ") + std::string(dtype_name(static_cast<DType>(a))) + "->" +
             dtype_name(static_cast<DType>(b)) + ": " + std::to_string(n);
    }
  return out.empty() ? "none" : out;
}

LaunchCounter& cast_launches() {
  static LaunchCounter c;
  return c;
}

LaunchCounter& gemm_launches() {
  static LaunchCounter c;
  return c;
}

LaunchCounter& misaligned_gemm_launches() {
  static LaunchCounter c;
  return c;
}

}  // namespace tandem::ops
