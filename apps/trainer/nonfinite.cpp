// apps/trainer/nonfinite.cpp: the ranks' shared verdict on a non-finite loss (see nonfinite.h).
#include "apps/trainer/nonfinite.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"      // defines: TANDEM_CHECK
#include "core/tensor.h"     // defines: Tensor
#include "dist/transport/bootstrap.h"  // defines: world, comm_for

namespace tandem::trainer {

OnNonfinite on_nonfinite_from_name(const std::string& name) {
  if (name == "stop") return OnNonfinite::Stop;
  if (name == "skip") return OnNonfinite::Skip;
  if (name == "off") return OnNonfinite::Off;
  TANDEM_THROW("on_nonfinite '", name, "': use stop, skip or off");
}

NonfiniteVerdict agree_nonfinite(float value) {
  const dist::World& w = dist::world();
  // Slots [0, world): 1 where that rank's value is not finite; [world, 2 world): the value itself.
  // Every other rank adds 0 to a slot, so the sum carries each value (NaN and inf included) exactly.
  std::vector<float> slots(2 * w.size, 0.0f);
  if (!std::isfinite(value)) slots[w.rank] = 1, slots[w.size + w.rank] = value;
  Tensor t = Tensor::from_vector(slots, {static_cast<int64_t>(slots.size())});
  dist::comm_for(Device::cpu()).all_reduce(t, dist::ReduceOp::Sum, "non-finite check")->wait();
  const std::vector<float> s = t.to_vector();
  NonfiniteVerdict v;
  for (int r = 0; r < w.size; ++r)
    if (s[r] != 0) v.ranks.push_back(r), v.values.push_back(s[w.size + r]);
  return v;
}

bool act_on_nonfinite(OnNonfinite policy, const NonfiniteVerdict& v, int64_t step, const std::string& what,
                      const OptionNames& names) {
  if (!v.any() || policy == OnNonfinite::Off) return false;
  const int me = dist::world().rank;
  std::string who;
  for (size_t i = 0; i < v.ranks.size(); ++i) {
    char b[96];
    std::snprintf(b, sizeof b, "%s%s %g on rank %d", i ? ", " : "", what.c_str(), v.values[i], v.ranks[i]);
    who += b;
  }
  char head[160];
  std::snprintf(head, sizeof head, "[rank %d] step %lld: %s is %g", me, (long long)step, what.c_str(),
                v.values.front());
  if (policy == OnNonfinite::Skip) {
    if (me == 0)
      std::fprintf(stderr, "[rank 0] step %lld: %s; every rank skips this step's update (%s)\n", (long long)step,
                   who.c_str(), option_name(names, "on_nonfinite", "skip").c_str());
    return true;
  }
  std::fprintf(stderr, "%s (%s); stopping on every rank before the update, so no checkpoint is written from this "
               "state. Lower %s or check the data; %s skips such steps instead.\n",
               head, who.c_str(), option_name(names, "lr").c_str(), option_name(names, "on_nonfinite", "skip").c_str());
  std::fflush(stderr);
  throw RunStopped(std::string(head) + " (" + who + ")");
}

bool skip_nonfinite_step(OnNonfinite policy, float value, int64_t step, const std::string& what,
                         const OptionNames& names) {
  if (policy == OnNonfinite::Off) return false;
  return act_on_nonfinite(policy, agree_nonfinite(value), step, what, names);
}

}  // namespace tandem::trainer
