// dist/checkpoint/zero_state.h: ZeRO's sharded optimizer state and masters, assembled unsharded.
//
// Checkpoints stay canonical (shard_layout.h): unsharded tensors by parameter name, so a run resumes
// at any world size and ZeRO stage, and under DDP or on one process. gather_zero_slices rebuilds,
// bucket by bucket, exactly the name-keyed state an unsharded optimizer's state() returns
// ("fc.weight.exp_avg" with fc.weight's shape): one all-gather per bucket and state name, in f32
// whatever the parameters' dtype (optimizer state and masters are f32; a 16-bit trip would round
// them). Keys are "<param>.<state>", or "<param>" itself (AMP's f32 masters,
// optim::MasterWeights::state_slices()); "<param>.step" is taken from the rank owning element 0.
// Every rank first agrees on the state names (a rank may own little). Only `root` keeps the
// tensors: it holds the whole state while it writes (save_checkpoint takes the tensors at once);
// the other ranks hold one bucket's worth at a time. Loading needs nothing from here: every rank
// reads the unsharded tensors and each segment copies its range (Optimizer::load_state).
// Stage 3's weights are not here: they are read, whole, inside Zero::full_parameters().
#pragma once
#include <vector>

#include "dist/zero.h"

namespace tandem::dist {

// Collective: every rank of zero.communicator() calls it with its own slices; `root` gets the tensors.
optim::NamedTensors gather_zero_slices(const Zero& zero, const std::vector<optim::StateSlice>& slices, int root = 0);

}  // namespace tandem::dist
