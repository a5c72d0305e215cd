// apps/trainer/run/preemption.cpp: the stop signals' handler and the ranks' agreement (see preemption.h).
#include "apps/trainer/run/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dist/transport/busy.h"  // defines: Busy, busy_progress

namespace tandem::trainer {

namespace {

// The signals that ask for a stop, in the order of the agreement's slots.
constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT};
constexpr int kSignalCount = 3;
const char* signal_name(int s) { return s == SIGTERM ? "SIGTERM" : s == SIGUSR1 ? "SIGUSR1" : "SIGINT"; }

// What the handler touches: lock-free atomics (async-signal-safe) and lines made at install time,
// written with write(2), the one output call a handler may make.
std::atomic<int> g_first{0};                // the first stop signal (0: none)
std::atomic<int> g_seen[kSignalCount] = {};  // 1 once that signal arrived
std::atomic<bool> g_again_said{false};
std::atomic<bool> g_starting{false};  // begin_startup() .. the first RunControl: a signal ends the process
char g_first_line[kSignalCount][320];
char g_startup_line[kSignalCount][320];
char g_again_line[320];
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

void say(const char* line) {
  const ssize_t ignored = ::write(STDERR_FILENO, line, std::strlen(line));
  (void)ignored;  // nothing a handler could do about a failed write
}

void on_stop_signal(int sig) {
  for (int i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == sig && g_starting.load()) {
      say(g_startup_line[i]);
      _exit(kPreemptedExit);  // async-signal-safe; no step to finish, nothing to save (a lock dies with us)
    }
  for (int i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == sig) {
      g_seen[i].store(1);
      int none = 0;
      if (g_first.compare_exchange_strong(none, sig)) say(g_first_line[i]);
      else if (!g_again_said.exchange(true)) say(g_again_line);
    }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void install_stop_signals(const std::string& program) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  const char* rank = std::getenv("PMI_RANK");  // MPICH's launcher sets it; MPI is not up yet
  const std::string who = std::string(rank ? "[rank " + std::string(rank) + "] " : "") + program;
  for (int i = 0; i < kSignalCount; ++i)
    std::snprintf(g_first_line[i], sizeof g_first_line[i],
                  "%s: %s received: finishing the current step, then saving a checkpoint (with --checkpoint-dir) "
                  "and exiting with status %d\n", who.c_str(), signal_name(kSignals[i]), kPreemptedExit);
  for (int i = 0; i < kSignalCount; ++i)
    std::snprintf(g_startup_line[i], sizeof g_startup_line[i],
                  "%s: %s received during start-up: no step to finish and nothing to save; exiting with status %d "
                  "now\n", who.c_str(), signal_name(kSignals[i]), kPreemptedExit);
  std::snprintf(g_again_line, sizeof g_again_line,
                "%s: another stop signal while stopping: ignored, the stop is under way (SIGKILL ends the process "
                "at once; an interrupted checkpoint write leaves the previous checkpoint intact)\n", who.c_str());
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a system call the signal interrupts (a read, a write, a poll inside MPI) resumes
  // instead of failing with EINTR in code that does not expect it.
  sa.sa_flags = SA_RESTART;
  for (int s : kSignals) sigaction(s, &sa, nullptr);
}

int stop_signal() { return g_first.load(); }

void begin_startup() { g_starting.store(true); }

RunControl::RunControl(dist::Communicator& comm, RunControlOptions options)
    : comm_(comm), options_(options), last_save_s_(now_s()) {
  g_starting.store(false);  // start-up is over: a stop signal is now acted on at a step boundary
  // The checkpoint writer's progress goes to the Busy scope save() opens (a no-op outside one).
  previous_progress_ =
      safetensors::set_write_progress([](uint64_t done, uint64_t) { dist::busy_progress(done); });
}

RunControl::~RunControl() {
  safetensors::set_write_progress(std::move(previous_progress_));
  // pending_ is dropped without a wait: every rank started it at the same boundary, so it finishes
  // on its own (the communication thread keeps its buffer), and waiting here could block an
  // exception's way out.
}

Decision RunControl::after_step(int64_t steps_done) {
  Decision d;
  if (options_.checkpoint_every > 0 && steps_done % options_.checkpoint_every == 0)
    d.save = true, d.why = "every " + std::to_string(options_.checkpoint_every) + " steps";
  // This boundary's local view: stop signals seen here, and (rank 0's clock decides for everyone)
  // whether the wall-time interval has passed.
  std::vector<float> local(kSignalCount + 1, 0.0f);
  for (int i = 0; i < kSignalCount; ++i) local[i] = static_cast<float>(g_seen[i].load());
  if (comm_.rank() == 0 && options_.checkpoint_interval_min > 0 &&
      now_s() - last_save_s_ >= options_.checkpoint_interval_min * 60)
    local[kSignalCount] = 1;
  // The agreed view: alone, this boundary's; with peers, the sum started at the last boundary.
  std::vector<float> agreed(kSignalCount + 1, 0.0f);
  if (comm_.size() == 1) {
    agreed = local;
  } else if (pending_) {
    pending_->wait();
    agreed = flags_.to_vector();
    if (saves_ != saves_at_start_) agreed[kSignalCount] = 0;  // a save since then restarted the interval
  }
  if (agreed[kSignalCount] > 0 && !d.save) {
    char b[96];
    std::snprintf(b, sizeof b, "%g min since the last checkpoint", options_.checkpoint_interval_min);
    d.save = true, d.why = b;
  }
  std::string signals;
  for (int i = 0; i < kSignalCount; ++i)
    if (agreed[i] > 0)
      signals += (signals.empty() ? "" : ", ") + std::string(signal_name(kSignals[i])) + " on " +
                 std::to_string(static_cast<int>(agreed[i])) + " of " + std::to_string(comm_.size()) + " rank(s)";
  if (!signals.empty()) {
    stopping_ = true, stop_why_ = signals;
    d.stop = true, d.save = options_.can_save, d.why = signals;
    pending_ = nullptr;  // no agreement for a boundary that will not come
    return d;
  }
  d.save = d.save && options_.can_save;
  if (comm_.size() > 1) {
    flags_ = Tensor::from_vector(local, {static_cast<int64_t>(local.size())});
    pending_ = comm_.all_reduce(flags_, dist::ReduceOp::Sum, "stop/save agreement");
    saves_at_start_ = saves_;
  }
  return d;
}

bool RunControl::save(const std::function<bool()>& write) {
  bool written = false;
  {
    dist::Busy busy("writing checkpoint", {.unit = "bytes"});
    written = write();
  }
  if (!written) return false;  // the same on every rank: none of them wrote or waits
  // Every rank leaves the save together, so the time the others spent waiting for the writer is
  // paused time on every rank (the trainers pause their clocks around save()), not a slow first
  // step after it that the straggler report would blame on them.
  comm_.barrier("checkpoint written")->wait();
  ++saves_, last_save_s_ = now_s();
  return true;
}

int RunControl::exit_preempted(int64_t steps_done, bool saved, bool rank0) const {
  if (rank0) std::printf("%s\n", stop_line(steps_done, saved).c_str());
  std::fflush(stdout);
  return kPreemptedExit;
}

std::string RunControl::stop_line(int64_t steps_done, bool saved) const {
  return "preempted: " + stop_why_ + "; stopped after step " + std::to_string(steps_done) +
         (saved ? " with the checkpoint above" : " without a checkpoint (no --checkpoint-dir: nothing to resume from)") +
         "; exiting with status " + std::to_string(kPreemptedExit) +
         (saved ? ": rerun the same command with --resume auto to continue" : "");
}

}  // namespace tandem::trainer
