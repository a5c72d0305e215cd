// apps/trainer/run/timeline_window.h: a progress interval's communication figures, from DDP's timeline.
//
// dist::Timeline keeps one StepTiming per synchronised backward (dist/timeline.h): how long its
// bucket collectives took and how much of that backward did not hide. A trainer prints them per
// progress interval, so a TimelineWindow remembers where the interval began and, when the interval
// closes, averages the steps since then and moves on:
//   exposed_ms  mean exposed (un-hidden) communication per step of the window;
//   overlap     hidden / total communication time over the window (1 when nothing was communicated).
// Steps that did not synchronise (no_sync micro-batches, replayed CUDA graphs) have no entry, so
// they count neither way. Reading GPU timings waits for their events: close once per interval.
#pragma once
#include <cstddef>

#include "dist/measure/timeline.h"  // defines: Timeline

namespace tandem::trainer {

struct CommWindow {
  double exposed_ms = 0, overlap = 1;
};

// The window over the timeline's steps [from, end) (pure arithmetic over tl.steps()).
CommWindow comm_window(dist::Timeline& tl, size_t from);

class TimelineWindow {
 public:
  // The figures of the steps recorded since the last close (or since this window was made), then
  // a new window starting after them.
  CommWindow close(dist::Timeline& tl);

 private:
  size_t from_ = 0;  // the timeline's first step of the open window
};

}  // namespace tandem::trainer
