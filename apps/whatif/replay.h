// apps/whatif/replay.h: one rank's step replayed as compute that may wait for communication, and a
// communication channel that runs one transfer at a time in the order they were issued.
//
// Why a replay and not a formula: ZeRO-3's compute waits for its own gathers, in forward and in
// backward, and which waits remain depends on where each gather was issued and what ran on the
// channel before it. dist/zero3.cpp prefetches one unit ahead, so a unit's gather queues behind the
// previous unit's reduce-scatter; a formula cannot follow that, an event replay can.
//
// The model: compute is a list of segments run one after another. Reaching a segment issues its
// `on_start` transfers (as a pre-forward hook issues a prefetch), then the segment waits for its
// `wait_for` transfer, then computes `work_ms`, then issues its `on_end` transfers (a bucket's
// gradients are ready). The channel (the communication thread) starts each transfer when it is
// issued and the one before it is done, and takes `ms` for it. Compute and channel do not slow each
// other: a CPU host's cost of moving the bytes is added to compute by model.cpp (Network::host_GBps).
// The replay ends when both the compute and the channel are done.
#pragma once
#include <vector>

namespace tandem::whatif {

struct Segment {
  double work_ms = 0;         // compute
  std::vector<int> on_start;  // transfers issued when the compute reaches it (indexes into the transfers)
  int wait_for = -1;          // then the transfer it needs before it computes (-1: none)
  std::vector<int> on_end;    // transfers issued when it is done
};

struct Replay {
  double end_ms = 0;          // when the compute and the channel are both done
  double compute_end_ms = 0;  // when the last segment is done
  double waited_ms = 0;       // time the compute spent waiting for a transfer before a segment
  double channel_ms = 0;      // the transfers' time, summed
};

// Each transfer must be issued exactly once, and before the segment that waits for it (checked).
Replay replay_step(const std::vector<Segment>& segments, const std::vector<double>& transfer_ms);

}  // namespace tandem::whatif
