// apps/train/stragglers.h: the end-of-run straggler report - which rank computed slowest.
//
// In data-parallel training every step waits for the slowest rank, so one slow GPU, a thermally
// throttled node or a rank that decodes on a busy CPU slows the whole job, and the per-step rates
// look the same on every rank. What differs is each rank's own compute time: wall time minus data
// wait minus communication that backward did not hide (a fast rank spends its surplus waiting in
// the all-reduce, which the timeline counts as exposed communication). Each rank sums its compute
// over the run's progress intervals (apps/train/loop.cpp); at the end they are gathered and the
// slowest is set beside the median, as Horovod's stall inspector names the lagging ranks.
#pragma once
#include <string>
#include <vector>

namespace tandem::apps {

struct Stragglers {
  std::vector<double> compute_s;  // per rank, in rank order: seconds of own compute this run
  int slowest = 0;                // rank with the most compute
  double median_s = 0;            // lower median over ranks (with 2 ranks: the faster one)
  // "slowest rank 1: 4.21 s compute vs median 0.93 s (4.5x); per rank: 0.93 4.21"
  std::string str() const;
};

// Collective (CPU communicator): every rank passes its compute seconds, every rank gets all.
Stragglers gather_stragglers(double my_compute_s);

}  // namespace tandem::apps
