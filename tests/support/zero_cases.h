// tests/support/zero_cases.h: ZeRO-1, 2 and 3 (dist/zero.h) against DDP, and resuming across stages -
// the bodies of tests/mpi_zero.cpp (MPI, a process a rank) and tests/test_zero.cpp (a thread a rank,
// dist/transport/comm_thread.h).
//
// The experiment is tests/support/ddp_fixture.h's: rank r trains on its rows of one full batch.
//   - ZeRO-1 and ZeRO-2 with AdamW (and LAMB, SGD with momentum, clipping, no_sync) take the same
//     steps as DDP: 1e-6 relative in f32. ZeRO-1 all-reduces exactly as DDP does and updates the
//     same elements with the same elementwise math: 1e-6 per element. ZeRO-2's reduce-scatter may
//     add the ranks' gradients in another order than the all-reduce: 1e-6 norm-wise per tensor
//     (model_diff in zero_cases.cpp says why not per element).
//   - Every rank's parameters stay bit-identical (the all-gather copies one owner's values).
//   - The gathered optimizer state equals DDP's unsharded state (same names, 1e-6 norm-wise).
//   - ZeRO-3 reduce-scatters as ZeRO-2 (its buckets regrouped by unit) and gathers one owner's
//     values: the same 1e-6 norm-wise, bit-identical ranks. Its weights are read inside
//     Zero::full_parameters() (Run::whole), the only time they are whole between steps.
//   - Resume: save at this N with ZeRO-2 and with ZeRO-3, resume with DDP and ZeRO-1, 2, 3, and on one
//     process (world size 1, the whole batch) - equal to the uninterrupted DDP run: 1e-6 norm-wise at
//     the same N; 1e-5 on one process, whose batch sums differ from the ranks' partial sums (as in
//     tests/mpi_ddp.cpp).
// Several buckets ({256 B, 1 KiB}) so shard boundaries cut through parameters, and the default
// sizes (one bucket). Every check_* issues collectives on `c`: call it on every rank at once.
#pragma once
#include <string>

#include "dist/communicator.h"

namespace tandem::testing::zero_cases {

// Pure: for world sizes 1 .. 7, every parameter element is owned exactly once and chunks are aligned.
void check_shard_layout();
// ZeRO-1 and ZeRO-2 with AdamW equal DDP with AdamW: several buckets, one bucket, and the gathers
// that need no buffer (a lone parameter's, stage 1's spent gradient bucket), with and without no_sync.
void check_adamw(dist::Communicator& c);
// The same with LAMB (norms across shards), SGD with momentum, clipping and no_sync.
void check_lamb_sgd_clip_accumulate(dist::Communicator& c);
// Save at ZeRO-2 and at ZeRO-3, resume under every stage (0 to 3) and on one process: equal to the
// uninterrupted run. The checkpoints go to `dir` (created; the files are removed at the end).
void check_resume(dist::Communicator& c, const std::string& dir);
// ZeRO-3 equals DDP (norm-wise 1e-6, as ZeRO-2): units by the default policy, by a policy of its own
// and the root alone; prefetch 0, 1 and 3; AdamW, SGD with momentum, LAMB; clipping; no_sync; and
// a model whose units' hooks never fire (the first step's trace pins them). Ranks bit-identical.
void check_zero3(dist::Communicator& c);
// The schedule itself: a unit's parameters hold bytes during its forward and not after it, none
// between steps, all inside full_parameters() (an evaluation forward there frees nothing); the
// first step keeps everything; the forward order recorded; the shards are 1/N of the parameters.
void check_zero3_schedule(dist::Communicator& c);

}  // namespace tandem::testing::zero_cases
