// dist/transport/split.h: sub-communicators (Communicator::split, MPI_Comm_split) - the rules, and
// the plan every backend's do_split builds from.
//
// The ranks that pass the same `color` form one new communicator, ranked by `key` (ties: by rank in
// the parent). Blocking, and a collective of the parent: every rank calls it, in the same place of
// its sequence of collectives, and every rank gets a communicator (color >= 0; MPI's MPI_UNDEFINED
// "no group" is not offered). The colours and keys travel first in an all_gather of the parent, so
// a rank that never calls split is named by the watchdog like any missing rank; the new
// communicator has a watchdog of its own (watchdog.h names world ranks). The caller owns it and
// destroys it before dist::finalize(). Tensor parallelism's grid (dist/tp/grid.h) is two splits of
// the world.
#pragma once
#include <vector>

#include "dist/communicator.h"

namespace tandem::dist {

// The members of a split, as the parent's ranks in the new communicator's rank order (computed
// once, in Communicator::split, from the gathered colours and keys).
struct SplitPlan {
  int color = 0;
  long long index = 0;       // the parent's splits so far, this one included (from 1)
  std::vector<int> members;  // members[new rank] = rank in the parent
  int new_rank = 0;          // this rank's place in members
};

}  // namespace tandem::dist
