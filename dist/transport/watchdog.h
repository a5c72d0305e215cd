// dist/transport/watchdog.h: a collective past its deadline either waits on for a peer that is
// busy and advancing, or ends the job naming the rank(s) missing.
//
// Each communicator polls these from its threads (comm_mpi.cpp's communication thread, comm_nccl.cpp's
// watchdog thread), over `watch`, a communicator duplicated for this alone so its messages never
// match a collective. seq numbers a communicator's collectives from 1 in issue order; a peer in #seq
// has reached it. A sub-communicator (Communicator::split) has its own `watch` and its own numbering;
// the messages still name MPI_COMM_WORLD ranks, and say that the collective ran on a sub-communicator.
//
// The question and its answer. Past the deadline (comm_timeout_s) a rank asks every peer "how far
// did you get?". Peers answer from their communicators' threads, also while idle between
// collectives, with the collective they are in (or the last one they finished) and their open
// Busy scope (busy.h: long host work they announced, how long it has run, how far it got and how
// long its progress has stood still). judge_overdue turns the answers into one verdict:
//   - a peer whose GPU faulted                      -> abort, naming the fault (below);
//   - a peer that did not answer, or answered from
//     before #seq with no announced work            -> abort: "rank(s) X did not reach collective #N"
//                                                      (dead, hung in compute, or on another path);
//   - a peer before #seq in announced work whose
//     progress stood still for the whole timeout    -> abort: hung inside that work, named with it;
//   - every missing peer busy and advancing         -> wait on and ask again later (at most one
//                                                      timeout after its progress last moved), so a
//                                                      slow disk never kills a healthy job;
//   - every peer reached #seq                       -> one more wait (a peer that arrived just as the
//                                                      question went out finishes it in milliseconds;
//                                                      at most 10 s), then, asked again, abort: the
//                                                      network or a GPU is stuck.
// So a real hang is named within comm_timeout_s + 3 s of the moment work stopped advancing (within
// 60 s at the default 45 s), whether or not the rank announced it.
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
#include <vector>

#include "core/device.h"
#include "dist/transport/busy.h"

namespace tandem::dist {

// Each world rank's host name (dist::init gathers them): a job on more than one host has its
// "did not reach" message say where the missing ranks run.
void watchdog_set_hosts(std::vector<std::string> hosts);
// The GPU whose sticky errors the watchdog checks (dist::init sets it; cpu: none).
void watchdog_watch_device(Device d);
// The watched GPU's sticky kernel fault ("cudaErrorIllegalAddress (...)"), or "" when there is none
// or no GPU is watched. Never blocks. Communicators may poll it to abort early on a fault.
std::string watchdog_local_fault();

// What a waiting rank remembers between two questions about the same collective.
struct OverdueMemory {
  long long seq = 0;         // the collective asked about last
  bool all_reached = false;  // every peer had reached it then
};

// Answers a pending question of a timed-out peer (never blocks; nothing to do when none is
// pending) with `seq` - the collective this rank is in, or, called while idle, the last one it
// finished - and this process's open Busy scope (busy.h).
void watchdog_answer(MPI_Comm watch, long long seq);
// Collective #seq (`what`) passed its deadline: asks every peer for up to 3 s how far it got and
// judges the answers (judge_overdue). Returns the seconds to wait before asking again when every
// missing peer is busy and advancing (a waiting rank prints one line saying so), or when every peer
// has reached #seq for the first time (`memory` keeps that between calls); otherwise prints why
// ("[rank R] ... rank(s) X did not reach collective #N within T s") and calls MPI_Abort. When this
// rank's own GPU has faulted it says "kernel fault on rank R: ..." instead and asks nobody.
double watchdog_overdue(MPI_Comm watch, long long seq, const std::string& what, double timeout_s,
                        OverdueMemory& memory);
// As watchdog_overdue, but never waits on: for a collective that cannot finish whatever the peers
// are doing (this rank's GPU faulted).
[[noreturn]] void watchdog_abort(MPI_Comm watch, long long seq, const std::string& what, double timeout_s);
// Ends the whole job after this rank printed why: flushes, gives the launcher 200 ms to forward the
// line (MPI_Abort can otherwise kill the job before MPICH's I/O forwarding delivers it - seen on the
// first GPU node run, where a dead-rank drill lost its message), then MPI_Abort.
[[noreturn]] void abort_job();

// ---- the verdict, as a pure function (tests/test_watchdog.cpp checks it without MPI) ----

// What one rank answered (or that it did not).
struct PeerAnswer {
  bool answered = false;
  long long reached = -1;  // the collective it is in, or the last it finished
  bool faulted = false;    // its GPU has a sticky kernel fault
  BusyReport busy;         // its open Busy scope
};

struct OverdueVerdict {
  enum class Kind { Wait, Faulted, Missing, Stalled, AllReached };
  Kind kind = Kind::AllReached;
  // Indices into the answers: faulted, missing (no answer, or idle before #seq), stalled (busy
  // before #seq, no progress for the timeout), busy (busy before #seq and advancing).
  std::vector<int> faulted, missing, stalled, busy;
  double wait_s = 0;        // Wait: seconds until the next question
  bool print_note = false;  // Wait: this rank is the lowest-numbered waiting one, so it prints the note
};
// answers[me] is this rank's own (answered, reached == seq) and is skipped; me = -1 for an observer
// that waits without being a rank (the thread communicator judges for the group).
OverdueVerdict judge_overdue(long long seq, double timeout_s, int me, const std::vector<PeerAnswer>& answers);

}  // namespace tandem::dist
