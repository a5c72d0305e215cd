// apps/whatif/replay.cpp: the step's replay (see replay.h).
#include "apps/whatif/replay.h"

#include <algorithm>

#include "core/check.h"

namespace tandem::whatif {

Replay replay_step(const std::vector<Segment>& segments, const std::vector<double>& transfer_ms) {
  const int n = static_cast<int>(transfer_ms.size());
  std::vector<double> done(transfer_ms.size(), -1);  // when each transfer finishes; -1: not issued
  double channel = 0;                                 // when the channel is free
  Replay r;
  // The channel is FIFO and never waits for compute, so a transfer's finish is fixed the moment it is
  // issued: the later of its issue time and the channel's free time, plus its own time.
  auto issue = [&](const std::vector<int>& ids, double at) {
    for (int id : ids) {
      TANDEM_CHECK(id >= 0 && id < n, "what-if replay: transfer ", id, " of ", n);
      TANDEM_CHECK(done[static_cast<size_t>(id)] < 0, "what-if replay: transfer ", id, " issued twice");
      const double ms = std::max(0.0, transfer_ms[static_cast<size_t>(id)]);
      channel = std::max(channel, at) + ms;
      done[static_cast<size_t>(id)] = channel;
      r.channel_ms += ms;
    }
  };
  double t = 0;  // the compute's clock
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    issue(s.on_start, t);
    if (s.wait_for >= 0) {
      TANDEM_CHECK(s.wait_for < n && done[static_cast<size_t>(s.wait_for)] >= 0, "what-if replay: segment ", i,
                   " waits for transfer ", s.wait_for, ", which nothing issued before it");
      const double ready = done[static_cast<size_t>(s.wait_for)];
      r.waited_ms += std::max(0.0, ready - t);
      t = std::max(t, ready);
    }
    t += std::max(0.0, s.work_ms);
    issue(s.on_end, t);
  }
  for (int id = 0; id < n; ++id)
    TANDEM_CHECK(done[static_cast<size_t>(id)] >= 0, "what-if replay: transfer ", id, " was never issued");
  r.compute_end_ms = t;
  r.end_ms = std::max(t, channel);
  return r;
}

}  // namespace tandem::whatif
