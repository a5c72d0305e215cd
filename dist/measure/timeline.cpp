// dist/measure/timeline.cpp: overlap arithmetic, timing resolution and the per-rank Chrome trace.
#include "dist/measure/timeline.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <nlohmann/json.hpp>

#include "core/profile.h"
#include "dist/collectives/strings.h"

namespace tandem::dist {

void compute_overlap(StepTiming& s) {
  std::vector<std::pair<double, double>> iv;
  for (const BucketTiming& b : s.buckets) iv.emplace_back(b.launch_us, std::max(b.launch_us, b.finish_us));
  std::sort(iv.begin(), iv.end());
  double comm = 0, exposed = 0, cur_lo = 0, cur_hi = -1;
  auto flush = [&] {  // one merged interval [cur_lo, cur_hi]
    if (cur_hi < cur_lo) return;
    comm += cur_hi - cur_lo;
    exposed += std::max(0.0, cur_hi - std::max(cur_lo, s.backward_end_us));
  };
  for (auto [lo, hi] : iv) {
    if (lo > cur_hi) flush(), cur_lo = lo, cur_hi = hi;  // a gap: a new merged interval starts
    else cur_hi = std::max(cur_hi, hi);
  }
  flush();
  s.comm_us = comm;
  s.exposed_us = exposed;
  s.overlap = comm > 0 ? (comm - exposed) / comm : 1.0;
}

std::string TimelineSummary::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "comm %.2f ms/step, exposed %.2f ms/step, overlap %.0f%% (%lld steps)", comm_ms,
                exposed_ms, 100 * overlap, static_cast<long long>(steps));
  return buf;
}

void Timeline::start_step(MarkPtr origin) {
  step_.origin = std::move(origin);
  step_.origin_host_us = profile::now_us();
  step_.gathers.clear();  // a forward whose backward did not synchronise (no_sync): its spans go
  step_.computes.clear();
}

void Timeline::gather_done(size_t unit, bool backward, const Work& work) {
  if (step_started()) step_.gathers.push_back({unit, backward, work.started(), work.finished()});
}

void Timeline::compute_done(size_t unit, bool backward, MarkPtr begin, MarkPtr end) {
  if (step_started() && begin) step_.computes.push_back({unit, backward, std::move(begin), std::move(end)});
}

void Timeline::bucket_done(MarkPtr ready, const Work& work, int64_t wire_bytes) {
  step_.buckets.push_back({std::move(ready), work.started(), work.finished(), wire_bytes});
}

void Timeline::end_step(MarkPtr backward_end) {
  step_.backward_end = std::move(backward_end);
  pending_.push_back(std::exchange(step_, {}));
  resolve_completed();  // keeps the pending list short without waiting for the GPU
}

bool Timeline::Raw::complete() const {
  if (!origin->complete() || !backward_end->complete()) return false;
  for (const Bucket& b : buckets)
    if (!b.ready->complete() || !b.launch->complete() || !b.finish->complete()) return false;
  for (const auto* spans : {&gathers, &computes})
    for (const Span& s : *spans)
      if (!s.begin->complete() || !s.end->complete()) return false;
  return true;
}

void Timeline::resolve_completed() {
  // One step behind: the step that just ended is still running on the GPU (its all-reduces and
  // optimizer are queued behind it), so it is never asked here; older ones normally are complete.
  // Asking with complete() and stopping at the first incomplete step keeps steps_ in order.
  while (pending_.size() > 1 && pending_.front().complete()) resolve_front();
}

void Timeline::resolve() {
  while (!pending_.empty()) resolve_front();
}

void Timeline::resolve_front() {
  const Raw& r = pending_.front();
  StepTiming s;
  s.step = static_cast<int64_t>(steps_.size());
  s.backward_end_us = r.backward_end->us_since(*r.origin);
  for (size_t b = 0; b < r.buckets.size(); ++b) {
    const Raw::Bucket& m = r.buckets[b];
    BucketTiming t{m.ready->us_since(*r.origin), m.launch->us_since(*r.origin), m.finish->us_since(*r.origin), m.bytes};
    s.buckets.push_back(t);
    if (!profile::trace_enabled()) continue;
    // Compute track: a zero-length event when the bucket became ready, the earliest its all-reduce could
    // start; the gap to "allreduce bucket <b>" on the comm track is the wait for in-order launch or the channel.
    const std::string id = "bucket " + std::to_string(b);
    profile::add_event({id + " ready", "comm", r.origin_host_us + t.ready_us, 0, 0});
    profile::add_event({"allreduce " + id, "comm", r.origin_host_us + t.launch_us, t.finish_us - t.launch_us, 1});
  }
  for (const auto& [spans, out] : {std::pair{&r.gathers, &s.gathers}, std::pair{&r.computes, &s.computes}})
    for (const Raw::Span& m : *spans) {
      out->push_back({m.unit, m.backward, m.begin->us_since(*r.origin), m.end->us_since(*r.origin)});
      if (profile::trace_enabled() && spans == &r.gathers)
        profile::add_event({"allgather unit " + std::to_string(m.unit), "comm", r.origin_host_us + out->back().begin_us,
                            out->back().end_us - out->back().begin_us, 1});
    }
  compute_overlap(s);
  steps_.push_back(std::move(s));
  pending_.pop_front();
}

const std::vector<StepTiming>& Timeline::steps() {
  resolve();
  return steps_;
}

TimelineSummary Timeline::summary() {
  resolve();
  TimelineSummary out;
  const size_t skip = steps_.size() > 1 ? 1 : 0;  // the first step pays one-time setup costs
  double comm = 0, exposed = 0;
  for (size_t i = skip; i < steps_.size(); ++i) comm += steps_[i].comm_us, exposed += steps_[i].exposed_us;
  out.steps = static_cast<int64_t>(steps_.size() - skip);
  if (out.steps > 0) {
    out.comm_ms = comm / 1e3 / out.steps;
    out.exposed_ms = exposed / 1e3 / out.steps;
    out.overlap = comm > 0 ? (comm - exposed) / comm : 1.0;
  }
  return out;
}

void write_trace(const std::string& path, Communicator& comm) {
  // Align clocks: ranks leave a barrier at nearly the same moment; each sends its clock reading.
  comm.barrier("trace clock sync")->wait();
  nlohmann::json mine = {{"now", profile::now_us()}, {"events", nlohmann::json::array()}};
  for (const profile::Event& e : profile::take_events())
    mine["events"].push_back({e.name, e.category, e.start_us, e.duration_us, e.track});
  std::vector<std::string> all = all_gather_strings(comm, mine.dump());
  if (comm.rank() != 0) return;
  std::vector<std::vector<profile::Event>> per_rank(all.size());
  double now0 = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    nlohmann::json j = nlohmann::json::parse(all[r]);
    if (r == 0) now0 = j["now"].get<double>();
    const double shift = now0 - j["now"].get<double>();
    for (const auto& e : j["events"])
      per_rank[r].push_back({e[0].get<std::string>(), e[1].get<std::string>(), e[2].get<double>() + shift,
                             e[3].get<double>(), e[4].get<int>()});
  }
  profile::write_chrome_trace(path, per_rank);
}

}  // namespace tandem::dist
