// apps/trainer/run/preemption.h: stopping and saving on request - preemption signals and checkpoint
// intervals in steps and in wall time - agreed by every rank at a step boundary (issue 20, defect 7).
// In full: apps/trainer/run/README.md ("preemption.h in detail").
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "apps/trainer/run/exit_status.h"  // defines: kExitPreempted
#include "core/safetensors.h"   // defines: WriteProgress
#include "dist/communicator.h"  // defines: Communicator, WorkPtr

namespace tandem::trainer {

// sysexits.h's EX_TEMPFAIL: "preempted; rerun with --resume auto to continue".
inline constexpr int kPreemptedExit = kExitPreempted;  // apps/trainer/run/exit_status.h

// Installs the handlers for SIGTERM, SIGUSR1 and SIGINT (idempotent). `program` prefixes the
// handler's line ("train_imagenet: SIGTERM received ..."); the rank comes from the launcher's
// environment (PMI_RANK), as MPI is not up yet.
void install_stop_signals(const std::string& program);
// The first stop signal this process received (0: none).
int stop_signal();
// Start-up, from begin_startup() (trainer_main calls it after install_stop_signals) until the first
// RunControl exists: there is no step to finish and nothing to save, and start-up may wait long (for
// a rank that never comes, a data scan), so a stop signal then ends the process at once, with
// kPreemptedExit and a line saying so, on every rank it reaches (mpiexec forwards it to all).
// Without begin_startup() (the library's tests) a signal only sets the flag, as before.
void begin_startup();

struct RunControlOptions {
  int64_t checkpoint_every = 0;        // save after every N-th step (0: off)
  double checkpoint_interval_min = 0;  // save once this many minutes passed since the last save,
                                       // on rank 0's clock (0: off)
  bool can_save = false;               // a checkpoint folder was given: a stop saves first
};

// What every rank does at a boundary.
struct Decision {
  bool save = false;  // call the trainer's checkpoint function now (through RunControl::save)
  bool stop = false;  // then leave the loop; the trainer exits with kPreemptedExit
  std::string why;    // for the log: "SIGTERM on 2 of 2 ranks", "every 100 steps", ...
};

class RunControl {
 public:
  // `comm`: the ranks' CPU communicator (dist::comm_for(Device::cpu())). Also routes the checkpoint
  // writer's progress (safetensors::set_write_progress) into the Busy scope save() opens.
  RunControl(dist::Communicator& comm, RunControlOptions options);
  ~RunControl();
  RunControl(const RunControl&) = delete;
  RunControl& operator=(const RunControl&) = delete;

  // The boundary after `steps_done` optimizer steps: every rank, after every step. Collective.
  Decision after_step(int64_t steps_done);
  // Runs `write` - the trainer's checkpoint function, called on every rank, returning whether a
  // checkpoint was written - as announced host work (a dist::Busy scope "writing checkpoint", whose
  // progress is the bytes the writer has put on the disk), so the ranks waiting for the writer in
  // their next collective wait on while it advances (dist/transport/busy.h). After a written
  // checkpoint every rank meets in a barrier ("checkpoint written": the others' wait for the writer
  // is then paused time on every rank), and the wall-time interval restarts. Returns what `write`
  // returned (the same on every rank).
  bool save(const std::function<bool()>& write);
  // The checkpoints written through save() so far (the run's report counts them).
  long long saves() const { return saves_; }

  // A stop was decided (true on every rank from that boundary on).
  bool stopping() const { return stopping_; }
  // The line rank 0 prints when it stops: "preempted: SIGTERM on 2 of 2 ranks after step 57; ..."
  // (`saved`: whether a checkpoint was written for it).
  std::string stop_line(int64_t steps_done, bool saved) const;
  // After a stop's checkpoint: rank 0 prints stop_line (flushed, before the launcher ends the job);
  // returns kPreemptedExit for main.
  int exit_preempted(int64_t steps_done, bool saved, bool rank0) const;

 private:
  dist::Communicator& comm_;
  RunControlOptions options_;
  safetensors::WriteProgress previous_progress_;
  dist::WorkPtr pending_;   // the agreement started at the last boundary
  Tensor flags_;            // its buffer: [SIGTERM, SIGUSR1, SIGINT ranks, interval due on rank 0]
  long long saves_at_start_ = 0;  // saves_ when pending_ started (a save since makes its interval flag stale)
  long long saves_ = 0;
  double last_save_s_ = 0;  // rank 0's steady clock at the last save (or the start)
  bool stopping_ = false;
  std::string stop_why_;
};

}  // namespace tandem::trainer
