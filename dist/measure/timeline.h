// dist/measure/timeline.h: when each bucket was ready, launched and finished - and what that means.
//
// Every synchronised backward records, per bucket, three moments (microseconds from the step's
// origin, the start of DDP's forward):
//   ready   - the bucket's last gradient was produced (compute timeline),
//   launch  - its all-reduce started (communication timeline),
//   finish  - its all-reduce finished,
// and backward_end, when the last gradient was produced. On a GPU these are CUDA events on the
// compute and communication streams; on the CPU, steady-clock readings. From them:
//   comm     = length of the union of the [launch, finish] intervals,
//   exposed  = the part of that union after backward_end: communication that nothing hid,
//   overlap  = (comm - exposed) / comm, the fraction of communication hidden behind backward.
// Reading GPU timings waits for the events, so steps() is for log intervals, not every step;
// end_step's clean-up never waits (it resolves only steps whose events completed, one step behind).
// ZeRO-3 (zero3.h) adds, per step, each unit's parameter all-gathers (start and finish on the
// communication timeline) and its compute between its hooks, forward and backward: a prefetch
// works when the gather of the next unit starts before the current unit's compute ends.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace tandem::dist {

struct BucketTiming {
  double ready_us = 0, launch_us = 0, finish_us = 0;
  int64_t bytes = 0;  // bytes on the wire
};

// ZeRO-3: one unit's interval on the communication (gather) or compute timeline.
struct UnitSpan {
  size_t unit = 0;
  bool backward = false;
  double begin_us = 0, end_us = 0;
};

struct StepTiming {
  int64_t step = 0;
  double backward_end_us = 0;
  std::vector<BucketTiming> buckets;  // in launch order
  std::vector<UnitSpan> gathers, computes;  // ZeRO-3, in the order they were waited for / ended
  double comm_us = 0, exposed_us = 0;
  double overlap = 1;  // 1 when there was nothing to hide
};

// Pure: fills comm_us, exposed_us and overlap from the bucket times and backward_end_us.
void compute_overlap(StepTiming& s);

struct TimelineSummary {
  int64_t steps = 0;       // steps averaged (the first, warm-up step is left out when there are more)
  double comm_ms = 0;      // mean per step
  double exposed_ms = 0;   // mean per step
  double overlap = 1;      // total hidden / total comm over those steps
  std::string str() const; // "comm 3.1 ms/step, exposed 0.4 ms, overlap 87%"
};

// The reducer reports each synchronised backward at these named points, in this order. Marks are
// kept raw until steps() or summary() reads them (reading a GPU mark waits for it).
class Timeline {
 public:
  void start_step(MarkPtr origin);  // the step's zero (DDP: each forward; a later call moves it)
  bool step_started() const { return step_.origin != nullptr; }
  // One bucket, in launch order, after its Work was waited for; wire_bytes: its size on the wire.
  void bucket_done(MarkPtr ready, const Work& work, int64_t wire_bytes);
  // ZeRO-3: unit u's all-gather (after its wait), and its compute from `begin` to `end`. Ignored
  // outside a step (no origin: an evaluation forward, a gather for a checkpoint).
  void gather_done(size_t unit, bool backward, const Work& work);
  void compute_done(size_t unit, bool backward, MarkPtr begin, MarkPtr end);
  void end_step(MarkPtr backward_end);  // keeps the step
  void drop_step() { step_ = {}; }      // a failed backward: forgets it
  // All steps so far, resolved (waits for outstanding GPU events).
  const std::vector<StepTiming>& steps();
  TimelineSummary summary();

 private:
  struct Raw {  // the marks of one step
    MarkPtr origin, backward_end;
    double origin_host_us = 0;  // profile::now_us() at the origin, to place GPU times in the trace
    struct Bucket { MarkPtr ready, launch, finish; int64_t bytes; };
    std::vector<Bucket> buckets;
    struct Span { size_t unit; bool backward; MarkPtr begin, end; };
    std::vector<Span> gathers, computes;
    bool complete() const;  // every mark reached (never blocks)
  };
  void resolve();            // every pending step (waits for GPU events)
  void resolve_completed();  // pending steps before the newest whose marks are complete (never waits)
  void resolve_front();      // the oldest pending step
  Raw step_;  // the step in progress
  std::deque<Raw> pending_;  // ended, not yet resolved; oldest first
  std::vector<StepTiming> steps_;
};

// Collects every rank's profile events (profile::take_events) on rank 0 and writes one Chrome
// trace with a process per rank. Collective over `comm` (the world's: dist::comm_for(Device::cpu())):
// every rank must call it. Clocks are aligned with a barrier (good to the barrier's exit skew,
// microseconds on one machine). Profile events are per process, so in-process ranks
// (transport/comm_thread.h) would each write every thread's events: use it with one process a rank.
void write_trace(const std::string& path, Communicator& comm);

}  // namespace tandem::dist
