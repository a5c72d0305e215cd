// apps/trainer/run/exit_status.h: how a run ended - the exit statuses of both trainers (and of the
// scripts in apps/scripts/, which pass them on), written down once here, and the record of the
// last run's end that the checkpoint folder keeps for a supervisor that cannot see the status.
//
// The table (exit_statuses(); README.md's "Exit statuses" and --help's footer print it):
//   0   completed                                   -
//   1   failed at run time (a crash, a lost rank,    retry: rerun with --resume auto
//       an I/O error, a hung collective)
//   2   usage error: flags, --config, a folder that  do not retry: fix the command
//       refuses the run (another job's lock,
//       another run's files)
//   3   stopped on a non-finite loss, gradient or    do not retry as is: a rerun stops at the same
//       weight (no checkpoint from that state)       step; change --lr, --amp, --clip-grad-norm
//   65  data or input error (EX_DATAERR): the data   do not retry: fix the data or the file
//       set, the vocabulary, a checkpoint that fails
//       its checks with no intact one of the run left
//   75  preempted (EX_TEMPFAIL): a stop signal; a    retry: rerun the same command with --resume auto
//       checkpoint was written at the step boundary
// 2 is what CLI11's parse errors map to (they carry codes 100-120 of their own: apps/trainer/run/cli.cpp).
// elastic.sh restarts after 1, 75 and a killed rank; never after 2, 3 or 65.
//
// The folder's record, "<checkpoint-dir>/run_status.json", written by rank 0 of a run that opened
// the folder (took its lock): "running" at start-up, then how it ended - state (completed,
// preempted, failed, usage, nonfinite, data), exit_status, why (the error's first line), advice,
// retry, the run id and the last checkpoint written. It holds even where the launcher's status
// does not: mpiexec itself can return 0 after a SIGTERM although every rank exited 75 (a Hydra race,
// apps/trainer/run/preemption.h). A job refused before it took the lock writes nothing there (the
// folder may be another job's). A record still "running" with no live job means the run was killed
// or crashed (abort by another rank, SIGKILL, out-of-memory): apps/scripts/run_status.py says so.
//   python3 apps/scripts/run_status.py <checkpoint-dir>   one line, and exits with the run's status
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "core/check.h"  // defines: Error

namespace tandem::trainer {

inline constexpr int kExitCompleted = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNonFinite = 3;
inline constexpr int kExitData = 65;       // sysexits.h EX_DATAERR
inline constexpr int kExitPreempted = 75;  // sysexits.h EX_TEMPFAIL

struct ExitMeaning {
  int status;
  const char* state;   // run_status.json's "state"
  const char* what;    // what happened
  bool retry;          // whether a rerun can succeed
  const char* advice;  // what a supervisor should do
};
// The table above, in status order.
const std::vector<ExitMeaning>& exit_statuses();
// The row of `status`; the row of 1 for a status not in the table.
const ExitMeaning& exit_meaning(int status);
// The table as --help's footer shows it: "Exit status: 0 completed; 1 ...".
std::string exit_status_help();

// A data or input file that cannot be used (thrown by a trainer around its data set-up and its
// resume read): the run ends with kExitData. what() is the library's message.
struct InputError : std::runtime_error {
  // every_rank: every rank throws it together (a collective decision, e.g. the checkpoint folder's):
  // rank 0 prints it and the world ends cleanly; else the throwing rank prints and ends the job.
  explicit InputError(const std::string& what, bool every_rank = false)
      : std::runtime_error(what), every_rank(every_rank) {}
  bool every_rank;
};

// f(), with a tandem::Error it throws turned into an InputError (the data set-up: a missing or
// unreadable data set is not a usage error, and a rerun will not fix it).
template <class F>
auto as_input_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

// Rank 0 of a run that owns `dir`: writes run_status.json "running" and remembers the folder for
// record_run_end. Never throws (a record that cannot be written is a note on stderr).
void record_run_start(const std::string& dir, const std::string& run_id, const std::string& program);
// Remembers the newest checkpoint written (shown in the record).
void record_checkpoint(const std::string& path);
// Writes how the run ended, when record_run_start was called in this process; `why` may be "".
void record_run_end(int status, const std::string& why);

}  // namespace tandem::trainer
