// apps/trainer/run/startup.h: the trainers' start-up checks, every rank's ending in one verdict before
// any training (issue 28, item 2).
//
// Under mpiexec a check can fail on one rank alone: its host lacks the data folder, sees another
// checkpoint folder, or its wrapper passed another path. A rank that simply exited left the others
// waiting for it forever (in MPI_Init, or in the first collective), with its message lost, since
// only rank 0 printed. So both trainers' checks end in a verdict (dist/transport/startup.h: reports
// gathered on rank 0 under the communication deadline and handed back to every rank):
//   1. the command line (parse and cross-checks, which include --data and --weights existing on
//      this host): trainer_main (run_flags.h) calls agree_on_arguments before anything else runs;
//   2. after the checkpoint folder is open (run_folder.h): check_every_rank - the folder each rank
//      was given is the one rank 0 opened (rank 0 writes a check file, every rank reads it back),
//      the --resume file is readable on this rank, and the trainer's own data check.
// When a rank fails, it prints its message, rank 0 repeats it with the rank and the host, and every
// rank exits within seconds. The status is the one the failing rank would have ended with alone
// (the first failing rank's, for the ranks that passed): 2 for the command line and for a checkpoint
// folder refused (run_flags.h's usage errors), 1 for the other checks (an error).
//
// The checkpoint folder across hosts: refused unless shared. Rank 0 writes every checkpoint and every
// rank reads the one it resumes from (apps/trainer/run/run_folder.h, checkpoint/checkpoint_dir.h), so a
// folder on each host's local disk would hold the checkpoints on rank 0's host only and fail at
// --resume, after the training time was spent. Node-local folders could be supported (rank 0 reads
// and broadcasts), but a run whose checkpoints live on one host's disk is lost with that host, which
// is what checkpoints are for; a shared folder (NFS, Lustre, a cloud file store) mounted at the same
// path everywhere is the layout every launcher documents. So a folder that is not the same on every
// rank is refused at start-up, naming the ranks and hosts that do not see rank 0's check file.
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
