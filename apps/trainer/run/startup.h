// apps/trainer/run/startup.h: the trainers' start-up checks, every rank's ending in one verdict before
// any training (issue 28, item 2).
// In full: apps/trainer/run/README.md ("startup.h in detail").
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include "apps/trainer/run/exit_status.h"  // defines: kExitUsage, kExitData
#include "apps/trainer/run/run_folder.h"   // defines: RunFolder
#include "dist/transport/bootstrap.h"  // defines: World

namespace tandem::trainer {

// Thrown on every rank by check_every_rank when some rank's check failed (rank 0 printed why):
// run_main exits with `status`, finalizing MPI (every rank reached the verdict).
struct StartupFailed : std::runtime_error {
  int status;
  StartupFailed(int s, const std::string& what) : std::runtime_error(what), status(s) {}
};

// The start-up checks' exit statuses (apps/trainer/run/exit_status.h's table): a refused command line or
// checkpoint folder is a usage error; a --resume file or data this rank cannot read is an input error
// (a retry sees the same missing file, so elastic.sh does not retry either).
inline constexpr int kStartupUsageExit = kExitUsage;
inline constexpr int kStartupErrorExit = kExitData;

// Verdict 1, for a job of more than one rank (dist::launcher_world_size() > 1): MPI is started
// (dist::init_mpi) and every rank's outcome of the command line - `status` 0 passed, else the exit
// status it would end with alone and `message` its words - is agreed. Returns the status this rank
// exits with (0: every rank passed, go on). Rank 0 prints every failure with its rank and host
// (a failure every rank shares once, without them); a failing rank prints its own.
int agree_on_arguments(const std::string& program, int status, const std::string& message);

// What one rank's own check found: "" passed, else the sentence to print.
using LocalCheck = std::function<std::string()>;

// Verdict 2, collective, after RunFolder::open and before the data set-up: the checkpoint folder is
// the same on every rank (with a folder), `resume_path` (the folder's resume_path(), or --resume
// without a folder; "" none) is readable here, and `data` (the trainer's check of its data on this
// host; may be empty) passes. Throws StartupFailed on every rank when a rank failed.
void check_every_rank(const RunFolder& folder, const std::string& resume_path, const dist::World& w,
                      const std::string& program, const LocalCheck& data);

}  // namespace tandem::trainer
