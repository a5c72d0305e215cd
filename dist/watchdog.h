// dist/watchdog.h: a collective past its deadline ends the job and names the rank(s) missing.
//
// Each communicator polls these from its collectives' wait loops (comm_mpi.cpp, comm_nccl.cpp),
// over `watch`, a communicator duplicated for this alone so its messages never match a collective.
// seq numbers a communicator's collectives from 1 in issue order; a peer in #seq has reached it.
#pragma once
#include <mpi.h>

#include <string>

namespace tandem::dist {

// Answers a timed-out peer's question "how far did you get?" with `seq`, the collective this rank
// is in. A rank that never answers did not reach it (dead, hung, or on another code path).
void watchdog_answer(MPI_Comm watch, long long seq);
// Collective #seq (`what`) passed comm_timeout_s: asks every peer for up to 3 s how far it got,
// prints "[rank R] ... rank(s) X did not reach collective #N within T s" and calls MPI_Abort.
[[noreturn]] void watchdog_abort(MPI_Comm watch, long long seq, const std::string& what, double timeout_s);

}  // namespace tandem::dist
