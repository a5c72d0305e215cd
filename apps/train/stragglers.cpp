// apps/train/stragglers.cpp: gathering per-rank compute time (see stragglers.h).
#include "apps/train/stragglers.h"

#include <algorithm>
#include <cstdio>

#include "core/tensor.h"     // defines: Tensor
#include "dist/transport/bootstrap.h"  // defines: world, comm_for

namespace tandem::apps {

Stragglers gather_stragglers(double my_compute_s) {
  const dist::World& w = dist::world();
  // Each rank fills its own slot; the sum is then every rank's value (f32: ~7 digits, plenty).
  std::vector<float> slots(w.size, 0.0f);
  slots[w.rank] = static_cast<float>(my_compute_s);
  Tensor t = Tensor::from_vector(slots, {static_cast<int64_t>(w.size)});
  dist::comm_for(Device::cpu()).all_reduce(t, dist::ReduceOp::Sum, "straggler report")->wait();
  Stragglers s;
  for (float v : t.to_vector()) s.compute_s.push_back(v);
  s.slowest = static_cast<int>(std::max_element(s.compute_s.begin(), s.compute_s.end()) - s.compute_s.begin());
  std::vector<double> sorted = s.compute_s;
  std::sort(sorted.begin(), sorted.end());
  s.median_s = sorted[(sorted.size() - 1) / 2];
  return s;
}

std::string Stragglers::str() const {
  char b[160];
  std::snprintf(b, sizeof b, "slowest rank %d: %.2f s compute vs median %.2f s", slowest, compute_s[slowest],
                median_s);
  std::string out = b;
  if (median_s > 0) {
    std::snprintf(b, sizeof b, " (%.1fx)", compute_s[slowest] / median_s);
    out += b;
  }
  out += "; per rank:";
  for (double c : compute_s) {
    std::snprintf(b, sizeof b, " %.2f", c);
    out += b;
  }
  return out;
}

}  // namespace tandem::apps
