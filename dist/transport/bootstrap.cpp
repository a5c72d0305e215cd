// dist/transport/bootstrap.cpp: MPI setup, device choice and communicator creation.
// See bootstrap.h for the contract.
#include "dist/transport/bootstrap.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "dist/transport/startup.h"   // defines: launcher_world_size
#include "dist/transport/watchdog.h"

namespace tandem::dist {

// Backends (comm_mpi.cpp, comm_nccl.cpp).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm world, bool staging, Device gpu, double timeout_s);
#ifdef TANDEM_WITH_CUDA
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm world, Device gpu, double timeout_s);
#endif

namespace {
struct State {
  World world;
  std::unique_ptr<Communicator> mpi;   // CPU tensors, and GPU tensors when staging
  std::unique_ptr<Communicator> nccl;  // GPU tensors otherwise
};
// A plain pointer, not a unique_ptr: a static destructor would tear the communicators down at exit
// even when finalize() was never called (an error escaped main), and with peers still inside a
// collective that teardown hangs (NCCL's destroy waits for its kernels, the MPI communicator joins a
// thread blocked on a peer). finalize() deletes it; leaving_without_finalize() handles the rest.
State* g_state = nullptr;
bool g_owns_mpi = false;  // init_mpi() initialised MPI, so finalize() finalizes it

// Exit paths that skip finalize(). With peers, this rank can no longer take part in their
// collectives, and destroying communicators could wait for those peers forever, so: one line, then
// MPI_Abort, which ends every rank of the job at once (the launcher reports a failure). Alone, there
// is nobody to wait for: the communicators are destroyed as finalize() would (MPI stays initialised,
// which MPICH tolerates at exit).
void leaving_without_finalize(const char* why) {
  static std::atomic<bool> leaving{false};  // once: the terminate handler may end in exit's handlers
  if (!g_state || leaving.exchange(true)) return;
  const World& w = g_state->world;
  if (w.size > 1) {
    std::fprintf(stderr, "[rank %d] tandem: %s without dist::finalize(); aborting the whole job so that the other "
                 "%d rank(s) do not wait for this one\n", w.rank, why, w.size - 1);
    abort_job();
  }
  delete std::exchange(g_state, nullptr);
}

// std::set_terminate: an exception escaped main (or a thread). The default handler would abort()
// this process only; the peers would sit in their next collective until the watchdog's deadline,
// and not at all under launchers that do not clean up.
std::terminate_handler g_previous_terminate = nullptr;
[[noreturn]] void on_terminate() {
  std::string what = "an unknown exception";
  try {
    if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
  } catch (const std::exception& x) { what = x.what(); } catch (...) {}
  if (g_state && g_state->world.size > 1) {
    std::fprintf(stderr, "[rank %d] tandem: uncaught error: %s\n", g_state->world.rank, what.c_str());
    leaving_without_finalize("an exception escaped main");
  }
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

// Runs `call` (an MPI call that waits for every rank) with a guard thread: if it has not returned
// after `timeout_s`, the guard prints "[rank R on HOST] tandem: <said>" and ends the process with
// `status` (_Exit: the stuck call holds MPI's locks, nothing else could run safely).
void with_deadline(const std::function<void()>& call, double timeout_s, const std::string& said, int status) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; })) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char* rank = std::getenv("PMI_RANK");
    std::fprintf(stderr, "[rank %s on %s] tandem: %s\n", rank ? rank : "?", host, said.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(status);
  });
  call();
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_one();
  guard.join();
}

// MPI_Finalize is a barrier and a close of every connection: well under a second on a healthy job;
// 10 s leaves room for a loaded machine.
constexpr double kFinalizeTimeoutS = 10;

// A job across hosts leaves without MPI_Finalize: after a barrier (the work of every rank is done),
// each rank tells the launcher it finalized and exits with its status. MPICH 4.0.2's MPI_Finalize
// over UCX's TCP transport now and then never returns across hosts (its UCX hook waits in a PMI
// barrier that does not complete), and a rank leaving it by a deadline is taken by Hydra (MPICH's
// mpiexec) for a failed process: Hydra kills the other ranks (SIGKILL, "EXIT CODE: 9"), and the
// finished job reports a failure. What MPI_Finalize would have told Hydra last is PMI-1's
// "cmd=finalize" on the socket it passed in PMI_FD; Hydra answers "cmd=finalize_ack". Files are
// closed and synced by then (checkpoints are written whole before the run ends); the operating system
// closes the connections.
[[noreturn]] void leave_job_finalized(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (const char* fd_text = std::getenv("PMI_FD")) {
    const int fd = std::atoi(fd_text);
    static const char kFinalize[] = "cmd=finalize\n";
    if (::write(fd, kFinalize, sizeof kFinalize - 1) == static_cast<ssize_t>(sizeof kFinalize - 1)) {
      pollfd reply{fd, POLLIN, 0};
      char ack[64];
      if (::poll(&reply, 1, static_cast<int>(kFinalizeTimeoutS * 1000)) > 0) (void)!::read(fd, ack, sizeof ack);
    }
  }
  std::_Exit(status);
}

void apply_env(InitOptions& o) {
  if (const char* s = std::getenv("TANDEM_HOST_STAGING")) o.host_staging = std::atoi(s) != 0;
  if (const char* s = std::getenv("TANDEM_COMM_TIMEOUT_S")) {
    o.comm_timeout_s = std::atof(s);
    TANDEM_CHECK(o.comm_timeout_s > 0, "TANDEM_COMM_TIMEOUT_S must be a positive number of seconds, got '", s, "'");
  }
}
}  // namespace

void init_mpi() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return;
  InitOptions o;
  apply_env(o);
  // Without mpiexec, MPI_Init_thread is MPI's singleton init: a world of one process. Under a
  // launcher MPI_Init waits inside its PMI exchange for every rank of the job, and nothing tandem
  // could ask names the rank missing there, so a rank that waited the timeout says what it waited
  // for, on which host, and exits 1: Hydra then ends the job (it tears every rank down when one that
  // started PMI exits non-zero) instead of it hanging unseen.
  char timeout_s[32];
  std::snprintf(timeout_s, sizeof timeout_s, "%.0f", o.comm_timeout_s);
  auto start = [] {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  };
  if (launcher_world_size() > 1)
    with_deadline(start, o.comm_timeout_s, std::string("MPI did not start within ") + timeout_s + " s: some rank of "
                  "this job never reached MPI_Init (it failed or hangs before MPI, or its host cannot reach this one); "
                  "ending this rank so that the job does not hang (TANDEM_COMM_TIMEOUT_S sets the wait)", 1);
  else
    start();
  g_owns_mpi = true;
}

const World& init(InitOptions options) {
  if (g_state) return g_state->world;
  apply_env(options);
  // A GPU that is there but unusable must not turn into a silent CPU run (every figure would be a
  // CPU figure). Choosing the CPU is the caller's decision: use_gpu = false.
  if (options.use_gpu && probe_cuda().broken())
    require_cuda("dist::init() with use_gpu on (the default; use_gpu = false trains on the CPU)");
  auto st = std::make_unique<State>();
  init_mpi();
  int provided = 0;
  MPI_Query_thread(&provided);
  // The communication thread calls MPI while the training thread may call it too.
  TANDEM_CHECK(provided == MPI_THREAD_MULTIPLE, "MPI was initialised without MPI_THREAD_MULTIPLE: call "
               "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let dist::init() initialise MPI");
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  World& w = st->world;
  w.options = options;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  set_error_rank(w.rank);
  // Processes that share memory are on one machine: their order among themselves is the local rank.
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &w.local_rank));
  MPI_CHECK(MPI_Comm_size(local, &w.local_size));
  MPI_Comm_free(&local);
  {
    // Every rank's host, for the watchdog's messages (a lost host shows as all of its ranks).
    constexpr int kHostChars = 64;  // HOST_NAME_MAX on Linux; longer names are cut
    char mine[kHostChars] = {};
    gethostname(mine, kHostChars - 1);
    std::vector<char> all(static_cast<size_t>(kHostChars) * static_cast<size_t>(w.size));
    MPI_CHECK(MPI_Allgather(mine, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, MPI_COMM_WORLD));
    std::vector<std::string> hosts;
    for (int r = 0; r < w.size; ++r) hosts.emplace_back(all.data() + static_cast<size_t>(r) * kHostChars);
    watchdog_set_hosts(std::move(hosts));
  }

  const int gpus = options.use_gpu ? cuda_device_count() : 0;
  w.device = gpus > 0 ? Device::cuda(w.local_rank % gpus) : Device::cpu();
  set_device(w.device);
  // NCCL refuses two ranks on one GPU; MPI through host memory does not.
  if (gpus > 0 && w.local_size > gpus && !w.options.host_staging) {
    if (w.rank == 0)
      std::fprintf(stderr, "[tandem] %d ranks share %d GPU(s) on one machine: GPU tensors go over MPI with host "
                   "staging\n", w.local_size, gpus);
    w.options.host_staging = true;
  }
  bool use_nccl = w.device.is_cuda() && !w.options.host_staging;
  st->mpi = make_mpi_communicator(MPI_COMM_WORLD, w.device.is_cuda() && !use_nccl, w.device, options.comm_timeout_s);
#ifdef TANDEM_WITH_CUDA
  if (use_nccl) st->nccl = make_nccl_communicator(MPI_COMM_WORLD, w.device, options.comm_timeout_s);
#endif
  watchdog_watch_device(w.device);
  g_state = st.release();
  static std::once_flag hooks;  // init() may run again after finalize()
  std::call_once(hooks, [] {
    // atexit: main returned (or exit() was called) while the communicators were still up.
    std::atexit([] { leaving_without_finalize("the process is exiting"); });
    g_previous_terminate = std::set_terminate(on_terminate);
  });
  return g_state->world;
}

void finalize(int exit_status_if_stuck) {
  const bool across_hosts = g_state && g_state->world.local_size < g_state->world.size;
  delete std::exchange(g_state, nullptr);  // joins the communication threads, frees the MPI/NCCL communicators
  int finalized = 0;
  MPI_Finalized(&finalized);
  const bool owns = g_owns_mpi && !finalized;
  g_owns_mpi = false;
  if (!owns) return;
  // The barrier first: MPICH 4.0.2 over UCX's TCP transport (the emulated cluster's, and Ethernet
  // clusters') hung in MPI_Finalize right after a failed start-up verdict in 2 of 3 trials, and not
  // in 6 of 6 with it. MPI_Finalize is collective anyway, so waiting for every rank costs nothing.
  if (exit_status_if_stuck < 0 || launcher_world_size() == 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return;
  }
  if (across_hosts && std::getenv("PMI_FD")) {
    const std::string status = std::to_string(exit_status_if_stuck);
    with_deadline([] { MPI_Barrier(MPI_COMM_WORLD); }, kFinalizeTimeoutS,
                  "the job's last barrier did not complete within 10 s; this rank exits now with status " + status,
                  exit_status_if_stuck);
    leave_job_finalized(exit_status_if_stuck);
  }
  // Even so, over TCP across hosts one rank now and then spins for ever closing its connections
  // inside MPI_Finalize (UCX's endpoint flush; seen on the emulated cluster after a finished run,
  // every rank past the barrier). The job's work is done and agreed by then: exit with its status.
  with_deadline([] { MPI_Barrier(MPI_COMM_WORLD), MPI_Finalize(); }, kFinalizeTimeoutS,
                "MPI_Finalize did not return within 10 s (MPICH over UCX's TCP transport can hang closing its "
                "connections); the job's work is done, so this rank exits now with status " +
                    std::to_string(exit_status_if_stuck), exit_status_if_stuck);
}

bool initialized() { return g_state != nullptr; }

const World& world() {
  TANDEM_CHECK(g_state, "dist::world() before dist::init(): call dist::init() at the start of main");
  return g_state->world;
}

Communicator& comm_for(Device d) {
  TANDEM_CHECK(g_state, "dist::comm_for() before dist::init(): call dist::init() at the start of main");
  return d.is_cuda() && g_state->nccl ? *g_state->nccl : *g_state->mpi;
}

std::vector<std::string> all_gather_strings(const std::string& mine) {
  return all_gather_strings(comm_for(Device::cpu()), mine);
}

}  // namespace tandem::dist
