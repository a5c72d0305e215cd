// dist/transport/watchdog.cpp: the progress question, its answer and the abort (see watchdog.h).
#include "dist/transport/watchdog.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace tandem::dist {

namespace {
constexpr int kPingTag = 7001, kReplyTag = 7002;  // the question and the answer, on `watch`
constexpr long long kFaulted = -2;  // a faulted rank's answer: not a collective number (those start at 1)
std::atomic<int> g_watched_gpu{-1};  // written once by dist::init, read by communication threads

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
  if (!watchdog_local_fault().empty()) seq = kFaulted;  // "I reached it, but my GPU cannot finish it"
  MPI_Send(&seq, 1, MPI_LONG_LONG, st.MPI_SOURCE, kReplyTag, watch);  // 8 bytes: sent eagerly
}

void watchdog_abort(MPI_Comm watch, long long seq, const std::string& what, double timeout_s) {
  // A live peer answers from inside its own collective's wait loop within milliseconds; 3 s covers
  // ranks that share oversubscribed cores. No answer means dead, hung in compute, or on another path.
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
  std::vector<long long> reached(size, -1);
  std::vector<MPI_Request> recvs(size, MPI_REQUEST_NULL), sends(size, MPI_REQUEST_NULL);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Irecv(&reached[p], 1, MPI_LONG_LONG, p, kReplyTag, watch, &recvs[p]);
    MPI_Isend(&seq, 1, MPI_LONG_LONG, p, kPingTag, watch, &sends[p]);
  }
  reached[rank] = seq;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(kGraceS);
  while (std::chrono::steady_clock::now() < end) {
    int all = 0;
    MPI_Testall(size, recvs.data(), &all, MPI_STATUSES_IGNORE);
    if (all) break;
    watchdog_answer(watch, seq);  // peers that timed out too are asking us the same question
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing, faulted;
  for (int p = 0; p < size; ++p) {
    if (reached[p] == kFaulted) faulted += (faulted.empty() ? "" : ", ") + std::to_string(world[p]);
    else if (reached[p] < seq) missing += (missing.empty() ? "" : ", ") + std::to_string(world[p]);
  }
  if (!faulted.empty())
    std::fprintf(stderr, "[rank %d] tandem watchdog: collective #%lld (%s) did not finish within %.0f s because of a "
                 "kernel fault on rank(s) %s (see that rank's message for the CUDA error). Aborting the job.\n",
                 me, seq, label.c_str(), timeout_s, faulted.c_str());
  else if (missing.empty())
    std::fprintf(stderr, "[rank %d] tandem watchdog: every rank reached collective #%lld (%s) but it did not "
                 "finish within %.0f s: the network or a GPU is stuck. Aborting the job.\n",
                 me, seq, label.c_str(), timeout_s);
  else
    std::fprintf(stderr, "[rank %d] tandem watchdog: rank(s) %s did not reach collective #%lld (%s) within %.0f s "
                 "(dead, hung, or on a different code path). Aborting the job; raise TANDEM_COMM_TIMEOUT_S if a "
                 "rank legitimately works alone for longer.\n",
                 me, missing.c_str(), seq, label.c_str(), timeout_s);
  abort_job();
}

}  // namespace tandem::dist
