// dist/transport/bootstrap.h: from "N processes started by mpiexec" to "N ranks with communicators".
//
// dist::init() calls MPI_Init_thread (unless someone already did), reads rank and world size,
// splits MPI_COMM_WORLD by shared memory to find the local rank (the rank among processes on the
// same machine), picks the GPU local_rank % device_count, and creates the communicators: MPI always,
// NCCL when the build has CUDA and a GPU is visible (its unique id is made on rank 0 and broadcast
// over MPI). A single process started without mpiexec is a world of size 1: MPI's singleton init.
//
// With use_gpu on, a GPU that is installed but unusable (probe_cuda().broken(), e.g. a driver older
// than the runtime) is an error (require_cuda's message), never a silent CPU run.
//
// MPI errors are returned (MPI_ERRORS_RETURN) and become tandem::Error through MPI_CHECK; every
// collective gets a deadline (InitOptions::comm_timeout_s) that dist/transport/watchdog.h enforces.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "core/device.h"
#include "dist/communicator.h"
#include "dist/collectives/strings.h"

namespace tandem::dist {

struct InitOptions {
  // Send GPU tensors over MPI through host memory instead of NCCL (ranks sharing one GPU, or no
  // NCCL). Default false. Environment: TANDEM_HOST_STAGING=1.
  bool host_staging = false;
  // Use a GPU when one is visible. Default true; false keeps everything on the CPU.
  bool use_gpu = true;
  // Seconds a rank waits inside one collective before it declares a peer lost. Default 45 s:
  // far longer than any legitimate wait inside a step (a collective waits for the slowest rank's
  // compute, which is seconds at most even on the first, autotuning step). The watchdog then asks
  // the peers for at most 3 s which rank is missing (watchdog.h) and aborts, so the job ends within
  // a minute. Raise it for long single-rank phases between collectives (e.g. rank 0 writing a
  // huge checkpoint). Environment: TANDEM_COMM_TIMEOUT_S.
  double comm_timeout_s = 45;
};

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes on this machine
  int local_size = 1;
  Device device;       // cuda:(local_rank % device_count), or cpu
  InitOptions options;
};

// Idempotent: the second call returns the first call's world. Environment variables override
// the options given here.
const World& init(InitOptions options = {});
// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is up already; init() calls it, and a program may
// call it earlier to talk to its peers before the communicators exist (dist/transport/startup.h:
// the ranks' start-up verdict, reached before the device is known). MPI initialised here is
// finalized by finalize(), with or without init(). Under a launcher (PMI_SIZE or
// OMPI_COMM_WORLD_SIZE > 1) MPI_Init waits for every rank of the job: a rank that never starts MPI
// would hold the others there forever, so after the timeout (TANDEM_COMM_TIMEOUT_S, 45 s as in
// InitOptions) this rank says so and exits with status 1, and the launcher ends the job.
void init_mpi();
// Destroys the communicators and finalizes MPI if init() or init_mpi() initialized it. Call it on every way out
// of main. A process that leaves without it (an exception escaped main, or main returned early)
// in a world of more than one rank prints "[rank R] tandem: ... without dist::finalize()" and calls
// MPI_Abort, so that no rank hangs in a collective or in a communicator's teardown.
// `exit_status_if_stuck` >= 0 (a program's agreed exit, under a launcher): should MPI_Finalize not
// return within 10 s - MPICH over UCX's TCP transport can spin closing its connections - the process
// ends with that status instead of hanging after its work is done.
void finalize(int exit_status_if_stuck = -1);
bool initialized();
const World& world();  // init() must have run

// The communicator for tensors on device d: NCCL for GPU tensors unless host staging was asked
// for; MPI (through its communication thread) for CPU tensors. This is how an app gets the
// world's communicators to pass in (DDP, ZeRO, the parameter server); nothing in dist/ calls it.
Communicator& comm_for(Device d);
// all_gather_strings (strings.h) over the world's CPU communicator, comm_for(Device::cpu()).
std::vector<std::string> all_gather_strings(const std::string& mine);

}  // namespace tandem::dist
