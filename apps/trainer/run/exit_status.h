// apps/trainer/run/exit_status.h: how a run ended - the exit statuses of both trainers (and of the
// scripts in apps/scripts/, which pass them on), written down once here, and the record of the
// last run's end that the checkpoint folder keeps for a supervisor that cannot see the status.
// In full: apps/trainer/run/README.md ("exit_status.h in detail").
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
