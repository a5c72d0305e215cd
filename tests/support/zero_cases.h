// tests/support/zero_cases.h: ZeRO-1 and ZeRO-2 (dist/zero.h) against DDP, and resuming across stages -
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
//   - Resume: save at this N with ZeRO-2, resume with ZeRO-1, DDP, and on one process (world size
//     1, the whole batch) - equal to the uninterrupted DDP run: 1e-6 norm-wise at the same N; 1e-5 on
//     one process, whose batch sums differ from the ranks' partial sums (as in tests/mpi_ddp.cpp).
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
// Save at ZeRO-2, resume under every stage and on one process: equal to the uninterrupted run.
// The checkpoint goes to `dir` (created; the file is removed at the end).
void check_resume(dist::Communicator& c, const std::string& dir);

}  // namespace tandem::testing::zero_cases
