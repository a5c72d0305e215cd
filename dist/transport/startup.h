// dist/transport/startup.h: every rank's start-up outcome, agreed before any training - so that a
// check that fails on one rank (a path its host does not have) ends every rank in seconds, with
// that rank's message, instead of leaving the others waiting for it in a collective.
//
// It works on MPI_COMM_WORLD itself (init_mpi() is enough: the device, the communicators and their
// watchdog may not exist yet, and a rank whose command line failed never builds them), with
// point-to-point messages under a tag of its own, so it can neither match a communicator's traffic
// (those run on duplicates of the world) nor hang: every rank sends its report to rank 0, which
// waits for all of them up to the deadline, then sends every rank the whole list. A rank that does
// not arrive within `timeout_s` is named by rank 0 ("rank(s) 3 did not reach the start-up check
// '<what>' within 45 s"), which then ends the job (abort_job); a rank that hears nothing from rank 0
// within twice that says so and ends the job too. So start-up is under a deadline as every
// collective is (dist/transport/watchdog.h), and the deadline is the same one (comm_timeout_s).
//
// What a failure means (the status, the message's words) is the caller's: the reports carry them as
// given, with the rank and its host, which the caller prints (apps/trainer/run/startup.h).
#pragma once
#include <string>
#include <vector>

namespace tandem::dist {

struct StartupReport {
  int rank = 0;
  std::string host;     // this rank's host name (gethostname)
  int status = 0;       // 0: passed; else the exit status the rank would have ended with alone
  std::string message;  // why it failed ("" when it passed), or any text rank 0 hands to all
};

// Collective over MPI_COMM_WORLD (MPI must be initialised: dist::init_mpi()). Returns every rank's
// report in rank order, the same list on every rank. `what` names the check in the deadline's
// message. Calls with the same `what` on every rank, in the same order.
std::vector<StartupReport> agree_at_startup(int status, const std::string& message, const std::string& what,
                                            double timeout_s);

// The job's size as its launcher announces it before MPI is up (MPICH: PMI_SIZE, Open MPI:
// OMPI_COMM_WORLD_SIZE); 1 for a process started alone.
int launcher_world_size();

// The deadline the trainers use: TANDEM_COMM_TIMEOUT_S, else InitOptions' default (45 s).
double startup_timeout_s();

}  // namespace tandem::dist
