// dist/transport/watchdog.h: a collective past its deadline ends the job and names the rank(s) missing.
//
// Each communicator polls these from its collectives' wait loops (comm_mpi.cpp, comm_nccl.cpp),
// over `watch`, a communicator duplicated for this alone so its messages never match a collective.
// seq numbers a communicator's collectives from 1 in issue order; a peer in #seq has reached it.
// A sub-communicator (Communicator::split) has its own `watch` and its own numbering; the messages
// still name MPI_COMM_WORLD ranks, and say that the collective ran on a sub-communicator. A peer
// answers only from inside a collective of the same communicator, so one that waits in another
// group's collective is reported as not having reached this one - which is where it is.
//
// A replayed CUDA graph issues collectives the watchdog cannot see: they were captured unwatched
// (their events belong to the graph). So the loop calls Communicator::watch_compute after each
// replay, on every rank alike, which puts the replay under the watchdog as one more collective: a
// hung or faulted replay aborts the job naming the rank.
//
// A GPU kernel fault (illegal address, ...) also stops a rank from finishing its collectives, and
// its peers would then blame it as "did not reach". So before blaming anyone the watchdog asks the
// local GPU (core/device.h cuda_fault()): a faulted rank reports "kernel fault on rank R: ..." and
// aborts, and it answers its peers' question with kFaulted so that their message names the fault.
#pragma once
#include <mpi.h>

#include <string>

#include "core/device.h"

namespace tandem::dist {

// The GPU whose sticky errors the watchdog checks (dist::init sets it; cpu: none).
void watchdog_watch_device(Device d);
// The watched GPU's sticky kernel fault ("cudaErrorIllegalAddress (...)"), or "" when there is none
// or no GPU is watched. Never blocks. Communicators may poll it to abort early on a fault.
std::string watchdog_local_fault();

// Answers a timed-out peer's question "how far did you get?" with `seq`, the collective this rank
// is in. A rank that never answers did not reach it (dead, hung, or on another code path).
void watchdog_answer(MPI_Comm watch, long long seq);
// Collective #seq (`what`) passed comm_timeout_s: asks every peer for up to 3 s how far it got,
// prints "[rank R] ... rank(s) X did not reach collective #N within T s" and calls MPI_Abort. When
// this rank's own GPU has faulted it says "kernel fault on rank R: ..." instead and asks nobody.
[[noreturn]] void watchdog_abort(MPI_Comm watch, long long seq, const std::string& what, double timeout_s);
// Ends the whole job after this rank printed why: flushes, gives the launcher 200 ms to forward the
// line (MPI_Abort can otherwise kill the job before MPICH's I/O forwarding delivers it - seen on the
// first GPU node run, where a dead-rank drill lost its message), then MPI_Abort.
[[noreturn]] void abort_job();

}  // namespace tandem::dist
