// dist/transport/watchdog.cpp: the progress question, its answer, the verdict and the abort (see watchdog.h).
#include "dist/transport/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace tandem::dist {

namespace {
constexpr int kPingTag = 7001, kReplyTag = 7002;  // the question and the answer, on `watch`
constexpr long long kFaulted = -2;  // a faulted rank's answer: not a collective number (those start at 1)
std::atomic<int> g_watched_gpu{-1};  // written once by dist::init, read by communication threads
std::vector<std::string> g_hosts;    // world rank -> host name; written once by dist::init, before any collective

// The answer on the wire: fixed size, plain bytes (every rank runs the same binary). 96 bytes, far
// below MPICH's eager limit, so MPI_Send returns at once even to a peer that stopped listening.
struct Wire {
  long long reached = -1;
  unsigned long long progress = 0;
  double busy_s = 0, stalled_s = 0;
  char what[56] = {};  // "" when not busy; longer descriptions are cut
  char unit[8] = {};
};

void copy_cut(char* dst, size_t n, const std::string& src) {
  std::strncpy(dst, src.c_str(), n - 1);
  dst[n - 1] = 0;
}

// The MPI_COMM_WORLD rank of each rank of `watch`. A sub-communicator (Communicator::split: tensor
// parallelism's groups) numbers its ranks from 0, but the launcher's output and every "[rank R]"
// prefix use world ranks, so the messages name those.
std::vector<int> world_ranks(MPI_Comm watch, int size) {
  std::vector<int> mine(size), world(size, -1);
  for (int p = 0; p < size; ++p) mine[p] = p;
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  if (MPI_Comm_group(watch, &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS)
    MPI_Group_translate_ranks(g, size, mine.data(), wg, world.data());
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  for (int p = 0; p < size; ++p)
    if (world[p] < 0) world[p] = p;  // not translatable: the communicator's own number is all we have
  return world;
}
}  // namespace

void abort_job() {
  std::fflush(stderr);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever does
}

void watchdog_set_hosts(std::vector<std::string> hosts) { g_hosts = std::move(hosts); }

void watchdog_watch_device(Device d) { g_watched_gpu = d.is_cuda() ? d.index : -1; }

std::string watchdog_local_fault() {
  const int gpu = g_watched_gpu.load();
  if (gpu < 0) return "";
  try {
    set_device(Device::cuda(gpu));  // this thread's current device may not be set yet
    return cuda_fault();
  } catch (const std::exception& e) {
    return e.what();  // the CUDA runtime refuses even these calls: that is the fault
  }
}

void watchdog_answer(MPI_Comm watch, long long seq) {
  int flag = 0;
  MPI_Status st;
  MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, watch, &flag, &st);
  if (!flag) return;
  long long ping = 0;
  MPI_Recv(&ping, 1, MPI_LONG_LONG, st.MPI_SOURCE, kPingTag, watch, MPI_STATUS_IGNORE);
  Wire w;
  w.reached = watchdog_local_fault().empty() ? seq : kFaulted;  // faulted: "I reached it, but my GPU cannot finish it"
  const BusyReport b = busy_report();
  if (b.busy) {
    w.progress = b.progress, w.busy_s = b.busy_s, w.stalled_s = b.stalled_s;
    copy_cut(w.what, sizeof w.what, b.what.empty() ? "host work" : b.what);
    copy_cut(w.unit, sizeof w.unit, b.unit);
  }
  MPI_Send(&w, sizeof w, MPI_BYTE, st.MPI_SOURCE, kReplyTag, watch);
}

OverdueVerdict judge_overdue(long long seq, double timeout_s, int me, const std::vector<PeerAnswer>& answers) {
  OverdueVerdict v;
  double stalled_most = 0;
  for (int p = 0; p < static_cast<int>(answers.size()); ++p) {
    const PeerAnswer& a = answers[p];
    if (p == me) continue;
    if (a.answered && a.faulted) v.faulted.push_back(p);
    else if (!a.answered || (a.reached < seq && !a.busy.busy)) v.missing.push_back(p);
    else if (a.reached < seq && a.busy.stalled_s >= timeout_s) v.stalled.push_back(p);
    else if (a.reached < seq) v.busy.push_back(p), stalled_most = std::max(stalled_most, a.busy.stalled_s);
  }
  using K = OverdueVerdict::Kind;
  v.kind = !v.faulted.empty() ? K::Faulted : !v.missing.empty() ? K::Missing : !v.stalled.empty() ? K::Stalled
           : !v.busy.empty()  ? K::Wait : K::AllReached;
  if (v.kind == K::Wait) {
    // Ask again one timeout after the busy peer's progress last moved: a peer that stops advancing
    // right now is named timeout_s later, not 2 x timeout_s. At least 1 s between questions (or
    // the timeout, when it is shorter: the thread communicator's tests use fractions of a second).
    v.wait_s = std::max(std::min(1.0, timeout_s), timeout_s - stalled_most);
    // Every waiting rank reaches the same verdict; the lowest-numbered one says so, once.
    v.print_note = true;
    for (int p = 0; p < me; ++p)
      if (answers[p].answered && !answers[p].faulted && answers[p].reached >= seq) v.print_note = false;
  }
  return v;
}

namespace {

std::string rank_list(const std::vector<int>& peers, const std::vector<int>& world) {
  std::string s;
  for (int p : peers) s += (s.empty() ? "" : ", ") + std::to_string(world[p]);
  return s;
}

// " Rank 2 runs on host b, rank 3 on host b." when the job spans more than one host (a stalled link or
// a lost machine shows as all of one host's ranks); "" on one host, where it would say nothing.
std::string host_list(const std::vector<int>& peers, const std::vector<int>& world) {
  if (g_hosts.empty() || std::all_of(g_hosts.begin(), g_hosts.end(), [](const std::string& h) { return h == g_hosts[0]; }))
    return "";
  std::string s;
  for (int p : peers)
    if (world[p] < static_cast<int>(g_hosts.size()))
      s += (s.empty() ? " Rank " : ", rank ") + std::to_string(world[p]) + (s.empty() ? " runs on host " : " on host ") +
           g_hosts[static_cast<size_t>(world[p])];
  return s.empty() ? s : s + ".";
}

// Asks, judges, and either returns the seconds to wait on (memory given, and every missing peer busy
// and advancing, or every peer there for the first time) or prints why and ends the job.
double overdue(MPI_Comm watch, long long seq, const std::string& what, double timeout_s, OverdueMemory* memory) {
  // A live peer answers from its communicator's thread within milliseconds (it polls every 20 ms
  // when idle); 3 s covers ranks that share oversubscribed cores. No answer means dead or hung.
  constexpr double kGraceS = 3;
  int rank = 0, size = 1;
  MPI_Comm_rank(watch, &rank);
  MPI_Comm_size(watch, &size);
  const std::vector<int> world = world_ranks(watch, size);
  // On a sub-communicator, say so: its collective numbers count its own collectives. A duplicate
  // of the world compares MPI_CONGRUENT; a split is MPI_SIMILAR (the world reordered) or UNEQUAL.
  int same = MPI_UNEQUAL;
  MPI_Comm_compare(watch, MPI_COMM_WORLD, &same);
  const std::string on = same == MPI_CONGRUENT || same == MPI_IDENT
                             ? std::string()
                             : " on a sub-communicator of " + std::to_string(size) + " ranks";
  const std::string label = what + on;
  const int me = world[rank];
  // The local GPU first: a fault here is the cause, whatever the peers answer.
  if (std::string fault = watchdog_local_fault(); !fault.empty()) {
    std::fprintf(stderr, "[rank %d] tandem watchdog: kernel fault on rank %d: %s. Collective #%lld (%s) cannot "
                 "finish because this rank's GPU stopped. Aborting the job; rerun with TANDEM_SYNC_CHECK=1 or under "
                 "compute-sanitizer to find the kernel.\n", me, me, fault.c_str(), seq, label.c_str());
    abort_job();
  }
  std::vector<Wire> replies(size);
  std::vector<MPI_Request> recvs(size, MPI_REQUEST_NULL), sends(size, MPI_REQUEST_NULL);
  std::vector<PeerAnswer> answers(size);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Irecv(&replies[p], sizeof(Wire), MPI_BYTE, p, kReplyTag, watch, &recvs[p]);
    MPI_Isend(&seq, 1, MPI_LONG_LONG, p, kPingTag, watch, &sends[p]);
  }
  answers[rank].answered = true, answers[rank].reached = seq;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(kGraceS);
  for (int left = size - 1; left > 0 && std::chrono::steady_clock::now() < end;) {
    for (int p = 0; p < size; ++p) {
      if (p == rank || answers[p].answered) continue;
      int got = 0;
      MPI_Test(&recvs[p], &got, MPI_STATUS_IGNORE);
      if (!got) continue;
      PeerAnswer& a = answers[p];
      const Wire& w = replies[p];
      a.answered = true, a.reached = w.reached, a.faulted = w.reached == kFaulted;
      a.busy.busy = w.what[0] != 0;
      a.busy.what = w.what, a.busy.unit = w.unit;
      a.busy.busy_s = w.busy_s, a.busy.stalled_s = w.stalled_s, a.busy.progress = w.progress;
      --left;
    }
    watchdog_answer(watch, seq);  // peers that timed out too are asking us the same question
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const OverdueVerdict v = judge_overdue(seq, timeout_s, rank, answers);
  using K = OverdueVerdict::Kind;
  if (memory && v.kind == K::AllReached && !(memory->seq == seq && memory->all_reached)) {
    // The last peer may have arrived just as the question went out (a busy rank finishing its
    // write): the collective then ends in milliseconds. Stuck, it is still stuck when asked again.
    MPI_Waitall(size, sends.data(), MPI_STATUSES_IGNORE);
    *memory = {seq, true};
    return std::min(timeout_s, 10.0);
  }
  if (memory) *memory = {seq, false};
  if (v.kind == K::Wait && memory) {
    MPI_Waitall(size, sends.data(), MPI_STATUSES_IGNORE);  // every peer answered, so every ping was taken
    if (v.print_note) {
      std::string who;
      for (int p : v.busy) who += (who.empty() ? "" : "; ") + ("rank " + std::to_string(world[p]) + " (" + describe(answers[p].busy) + ")");
      std::fprintf(stderr, "[rank %d] tandem watchdog: collective #%lld (%s) is waiting for %s. Waiting on while it "
                   "advances (it counts as hung once its progress stands still for %.0f s).\n",
                   me, seq, label.c_str(), who.c_str(), timeout_s);
    }
    return v.wait_s;
  }
  if (v.kind == K::Faulted) {
    std::fprintf(stderr, "[rank %d] tandem watchdog: collective #%lld (%s) did not finish within %.0f s because of a "
                 "kernel fault on rank(s) %s (see that rank's message for the CUDA error). Aborting the job.\n",
                 me, seq, label.c_str(), timeout_s, rank_list(v.faulted, world).c_str());
  } else if (v.kind == K::Missing) {
    // Ranks that answered from before #seq are alive but elsewhere: say so, it narrows the search.
    std::string alive;
    for (int p : v.missing)
      if (answers[p].answered)
        alive += " Rank " + std::to_string(world[p]) + " is alive, idle after collective #" +
                 std::to_string(answers[p].reached) + ", in no announced work: hung in compute or on another path.";
    std::fprintf(stderr, "[rank %d] tandem watchdog: rank(s) %s did not reach collective #%lld (%s) within %.0f s "
                 "(dead, hung, or on a different code path).%s%s Aborting the job; long work a rank does alone should "
                 "announce itself (dist::Busy, dist/transport/busy.h), or raise TANDEM_COMM_TIMEOUT_S.\n",
                 me, rank_list(v.missing, world).c_str(), seq, label.c_str(), timeout_s, alive.c_str(),
                 host_list(v.missing, world).c_str());
  } else if (v.kind == K::Stalled) {
    std::string why;
    for (int p : v.stalled) why += (why.empty() ? "" : "; ") + ("rank " + std::to_string(world[p]) + " was " + describe(answers[p].busy));
    std::fprintf(stderr, "[rank %d] tandem watchdog: rank(s) %s did not reach collective #%lld (%s): %s. Its progress "
                 "stood still for the whole %.0f s timeout, so it is hung inside that work (a stuck disk or file "
                 "system?). Aborting the job.\n",
                 me, rank_list(v.stalled, world).c_str(), seq, label.c_str(), why.c_str(), timeout_s);
  } else {
    std::fprintf(stderr, "[rank %d] tandem watchdog: every rank reached collective #%lld (%s) but it did not "
                 "finish within %.0f s: the network or a GPU is stuck. Aborting the job.\n",
                 me, seq, label.c_str(), timeout_s);
  }
  abort_job();
}

}  // namespace

double watchdog_overdue(MPI_Comm watch, long long seq, const std::string& what, double timeout_s,
                        OverdueMemory& memory) {
  return overdue(watch, seq, what, timeout_s, &memory);
}

void watchdog_abort(MPI_Comm watch, long long seq, const std::string& what, double timeout_s) {
  overdue(watch, seq, what, timeout_s, nullptr);
  abort_job();  // overdue only returns when it may wait
}

}  // namespace tandem::dist
