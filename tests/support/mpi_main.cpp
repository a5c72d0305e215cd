// tests/support/mpi_main.cpp: doctest main for tests run under mpiexec.
// Every rank runs the same test cases (they call collectives, so all ranks must). dist::init()
// sets up MPI and the communicators once for the whole executable. The exit code is the worst over
// all ranks, so ctest sees a failure on any rank.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include "dist/bootstrap.h"

int main(int argc, char** argv) {
  const tandem::dist::World& w = tandem::dist::init();
  doctest::Context ctx(argc, argv);
  if (w.rank != 0) ctx.setOption("minimal", true);  // one full report (rank 0), failures from all
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  tandem::dist::finalize();
  return worst;
}
