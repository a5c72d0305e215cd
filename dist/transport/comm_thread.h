// dist/transport/comm_thread.h: N ranks as N threads of one process - a communicator for tests and teaching.
//
// What it is for: the reducer, DDP, ZeRO and SyncBatchNorm talk to a Communicator& only, so they can
// run without mpiexec. run_ranks(4, body) starts 4 threads, each with its own communicator of one
// group, and runs body(comm) on each, as `mpiexec -n 4` runs main() on 4 processes. A test then
// runs in one process under ctest, a debugger or a sanitizer, and sees every rank's CHECKs.
//
// Semantics, as the MPI backend's (comm_mpi.cpp), so a test that passes here means the same there:
//   - a call starts the collective and returns a Work at once; the collective runs when the last
//     rank of the group has issued it, on that rank's thread, and wait() blocks until it is done;
//   - sums run as a binary tree over the ranks in order, ((r0 + r1) + (r2 + r3)) + ..., the order of
//     MPICH's recursive doubling; each addition is host_reduce.h's add_into (16-bit floats widened
//     to f32 and rounded back at each step). Avg divides the sum by N afterwards. Every rank gets
//     the same bits;
//   - the k-th collective of every rank is one collective (issue order, as MPI). Unlike MPI it checks
//     that the ranks agree on kind, dtype, sizes and root, and fails the collective on every rank
//     with the first difference, where MPI would hang or pair up the wrong buffers;
//   - a wait longer than ThreadOptions::timeout_s fails, naming the ranks that never issued the
//     collective (the watchdog's message, without ending the process), and fails the whole group -
//     unless every missing rank's thread is in a Busy scope that advances (transport/busy.h): as
//     under MPI, the wait then goes on, and a scope stalled for the timeout fails it, named.
//   - split (communicator.h) makes sub-groups of the same kind: the first member to arrive creates
//     the group, errors name a member as "rank 1 (world rank 3)", and a failure of the whole group
//     (a rank threw) reaches every sub-group, so nobody waits out a timeout inside one.
// What it leaves out: GPU tensors (refused; GPU paths are tested under mpiexec), and speed (the
// last rank to arrive does the whole reduction alone: it is for correctness).
//
// Process globals that ranks-as-threads share, and what a test does about them:
//   - autograd's grad mode, end-of-backward callbacks and zero_grad_copies() counter are
//     thread_local (core/autograd.cpp), so each rank's backward, hooks and reducer run undisturbed;
//   - the default random generator is shared and unsynchronised: draw with a Generator of your own;
//   - profile events and the allocator's byte counters (memory_stats) are per process:
//     write_trace (measure/timeline.h) and memory measurements need a process a rank;
//   - backend settings (ops' deterministic/fusion switches) are process atomics, alike for all ranks;
//   - the "[rank R] " prefix of error messages is per process (set_error_rank), and dist::init(),
//     world() and comm_for() know nothing of these ranks: errors thrown in a rank's thread carry no
//     rank, so run_ranks prefixes "rank R: " when it rethrows one.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace tandem::dist {

struct ThreadOptions {
  // Seconds a wait may last before the collective counts as lost. Default 60: far beyond any
  // test's collective (they take microseconds), short of ctest's timeout, so a hang names its rank.
  double timeout_s = 60;
};

// One group of `ranks` communicators; communicator r is rank r. Each is used by one thread.
std::vector<std::unique_ptr<Communicator>> make_thread_group(int ranks, ThreadOptions options = {});

// Runs body(comm) on `ranks` threads, each with its rank's communicator, and returns when all have
// finished. When a rank throws, the group fails every collective in flight or to come, so the other
// ranks stop at once instead of waiting out the timeout; the first error is then rethrown here,
// a tandem::Error prefixed "rank R: " (other exceptions, such as doctest's REQUIRE, as they are).
void run_ranks(int ranks, const std::function<void(Communicator&)>& body, ThreadOptions options = {});

}  // namespace tandem::dist
