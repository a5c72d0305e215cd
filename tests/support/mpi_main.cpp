// tests/support/mpi_main.cpp: doctest main for tests run under mpiexec.
// Every rank runs the same test cases (they call collectives, so all ranks must). dist::init()
// sets up MPI and the communicators once for the whole executable. The exit code is the worst over
// all ranks, so ctest sees a failure on any rank.
// Compiled with TANDEM_TEST_REQUIRES_GPU (the tests/mpi_gpu_*.cpp executables): when any rank has
// no GPU, every rank finalizes MPI and exits 77 (ctest: Skipped). The decision is one all-reduce,
// so the ranks agree even if only some of them see a GPU; all of them exit 77 cleanly, and
// MPICH's mpiexec then returns 77 itself (a rank that exited alone would make it kill the others).
// A rank whose machine has a GPU that CUDA cannot use fails instead (see support/main.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

#include "core/device.h"
#include "dist/transport/bootstrap.h"

int main(int argc, char** argv) {
  const tandem::dist::World& w = tandem::dist::init();
#ifdef TANDEM_TEST_REQUIRES_GPU
  const tandem::CudaProbe& probe = tandem::probe_cuda();
  int broken = probe.broken() ? 1 : 0, any_broken = 0;
  MPI_Allreduce(&broken, &any_broken, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_broken) {
    if (broken) std::printf("FAILED: [rank %d] this machine has a GPU that CUDA cannot use: %s\n", w.rank,
                            probe.str().c_str());
    tandem::dist::finalize();
    return 1;
  }
  int mine = w.device.is_cuda() ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (w.rank == 0)
      std::printf("SKIPPED: a rank has no CUDA device (%s)\n",
                  tandem::built_with_cuda() ? "built with CUDA" : "CPU-only build");
    tandem::dist::finalize();
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  if (w.rank != 0) ctx.setOption("minimal", true);  // one full report (rank 0), failures from all
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  tandem::dist::finalize();
  return worst;
}
