// apps/trainer/step/nonfinite.cpp: the ranks' shared verdict on non-finite losses, gradients and weights
// (see nonfinite.h).
#include "apps/trainer/step/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"      // defines: TANDEM_CHECK
#include "core/tensor.h"     // defines: Tensor

namespace tandem::trainer {

OnNonfinite on_nonfinite_from_name(const std::string& name) {
  if (name == "stop") return OnNonfinite::Stop;
  if (name == "skip") return OnNonfinite::Skip;
  if (name == "off") return OnNonfinite::Off;
  TANDEM_THROW("on_nonfinite '", name, "': use stop, skip or off");
}

bool NonfiniteVerdict::loss_or_gradients() const {
  for (const Bad& b : ranks)
    if (b.loss_bad || b.found.gradients > 0) return true;
  return false;
}

bool NonfiniteVerdict::weights() const {
  for (const Bad& b : ranks)
    if (b.found.weights > 0) return true;
  return false;
}

NonfiniteVerdict agree_nonfinite(dist::Communicator& control, const Health& mine) {
  const int me = control.rank(), n = control.size();
  // Four slots per rank, each rank writing only its own: [0, W) 1 where the loss is not finite,
  // [W, 2W) the loss itself, [2W, 3W) the gradient count, [3W, 4W) the weight count. Every other
  // rank adds 0 to a slot, so the sum carries each value (NaN and inf included) exactly.
  std::vector<float> slots(4 * n, 0.0f);
  if (!std::isfinite(mine.loss)) slots[me] = 1, slots[n + me] = mine.loss;
  // A count of 2^24 + 1 rounds in f32 but never to 0, which is all the verdict needs.
  slots[2 * n + me] = static_cast<float>(mine.gradients);
  slots[3 * n + me] = static_cast<float>(mine.weights);
  Tensor t = Tensor::from_vector(slots, {static_cast<int64_t>(slots.size())});
  control.all_reduce(t, dist::ReduceOp::Sum, "non-finite check")->wait();
  const std::vector<float> s = t.to_vector();
  NonfiniteVerdict v;
  v.me = me;
  for (int r = 0; r < n; ++r) {
    NonfiniteVerdict::Bad b;
    b.rank = r;
    b.loss_bad = s[r] != 0;
    b.found.loss = b.loss_bad ? s[n + r] : 0.0f;
    b.found.gradients = static_cast<int64_t>(s[2 * n + r]);
    b.found.weights = static_cast<int64_t>(s[3 * n + r]);
    if (b.loss_bad || b.found.gradients > 0 || b.found.weights > 0) v.ranks.push_back(b);
  }
  return v;
}

namespace {

// "loss nan on rank 1, loss inf on rank 3" / "12 on rank 0, 12 on rank 1": who found what.
std::string who(const NonfiniteVerdict& v, bool loss, bool weights) {
  std::string s;
  for (const NonfiniteVerdict::Bad& b : v.ranks) {
    char e[96] = "";
    if (loss && b.loss_bad) std::snprintf(e, sizeof e, "loss %g on rank %d", b.found.loss, b.rank);
    else if (!loss && !weights && b.found.gradients > 0)
      std::snprintf(e, sizeof e, "%lld on rank %d", (long long)b.found.gradients, b.rank);
    else if (weights && b.found.weights > 0)
      std::snprintf(e, sizeof e, "%lld on rank %d", (long long)b.found.weights, b.rank);
    if (*e) s += (s.empty() ? "" : ", ") + std::string(e);
  }
  return s;
}

int64_t largest(const NonfiniteVerdict& v, bool weights) {
  int64_t n = 0;
  for (const NonfiniteVerdict::Bad& b : v.ranks) n = std::max(n, weights ? b.found.weights : b.found.gradients);
  return n;
}

[[noreturn]] void stop(const std::string& head, const std::string& why, const std::string& advice) {
  std::fprintf(stderr, "%s (%s); %s\n", head.c_str(), why.c_str(), advice.c_str());
  std::fflush(stderr);
  throw RunStopped(head + " (" + why + ")");
}

}  // namespace

bool act_on_nonfinite(OnNonfinite policy, const NonfiniteVerdict& v, int64_t step, const OptionNames& names) {
  if (!v.any() || policy == OnNonfinite::Off) return false;
  const int me = v.me;
  char head[192];
  if (v.weights()) {
    // The weights the previous update (or the checkpoint load) left: no skip can undo them.
    std::snprintf(head, sizeof head, "[rank %d] step %lld: the weights hold %lld non-finite value(s) before this step",
                  me, (long long)step, (long long)largest(v, true));
    stop(head, who(v, false, true),
         "the last update (or the checkpoint this run resumed from) made them so, which skipping steps cannot undo; "
         "stopping on every rank, so no checkpoint is written from this state. Lower " + option_name(names, "lr") +
             " or check the data, and resume from an earlier checkpoint.");
  }
  const bool loss = [&] {
    for (const NonfiniteVerdict::Bad& b : v.ranks)
      if (b.loss_bad) return true;
    return false;
  }();
  if (loss) {
    float first = 0;
    for (const NonfiniteVerdict::Bad& b : v.ranks)
      if (b.loss_bad) {
        first = b.found.loss;
        break;
      }
    std::snprintf(head, sizeof head, "[rank %d] step %lld: loss is %g", me, (long long)step, first);
  } else {
    std::snprintf(head, sizeof head, "[rank %d] step %lld: the gradients hold %lld non-finite value(s)", me,
                  (long long)step, (long long)largest(v, false));
  }
  const std::string why = who(v, loss, false);
  if (policy == OnNonfinite::Skip) {
    if (me == 0)
      std::fprintf(stderr, "[rank 0] step %lld: %s%s; every rank skips this step's update (%s)\n", (long long)step,
                   loss ? "" : "non-finite gradients: ", why.c_str(), option_name(names, "on_nonfinite", "skip").c_str());
    return true;
  }
  stop(head, why, "stopping on every rank before the update, so no checkpoint is written from this state. Lower " +
                      option_name(names, "lr") + " or check the data; " + option_name(names, "on_nonfinite", "skip") +
                      " skips such steps instead.");
}

void check_state_finite(dist::Communicator& control, int64_t bad, int64_t step, const std::string& action,
                        const OptionNames& names) {
  Health h;
  h.weights = bad;
  const NonfiniteVerdict v = agree_nonfinite(control, h);
  if (!v.weights()) return;
  char head[192];
  std::snprintf(head, sizeof head, "[rank %d] after step %lld: the state to %s holds %lld non-finite value(s)",
                v.me, (long long)step, action.c_str(), (long long)largest(v, true));
  stop(head, who(v, false, true),
       "stopping on every rank without it. Lower " + option_name(names, "lr") +
           " or check the data, and resume from an earlier checkpoint.");
}

}  // namespace tandem::trainer
