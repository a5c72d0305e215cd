// tests/support/main.cpp: doctest main for single-process tests.
// A test compiled with TANDEM_TEST_REQUIRES_GPU exits 77 (ctest: Skipped) only when the machine has
// no GPU. When it has one that CUDA cannot use (old driver, broken install), the test FAILS with the
// CUDA error and the driver/runtime versions: a GPU machine must never report its GPU tests skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
#ifdef TANDEM_TEST_REQUIRES_GPU
  const tandem::CudaProbe& probe = tandem::probe_cuda();
  if (probe.broken()) {
    std::printf("FAILED: this machine has a GPU that CUDA cannot use: %s\n", probe.str().c_str());
    return 1;
  }
  if (!probe.usable()) {
    std::printf("SKIPPED: no GPU on this machine (%s)\n", probe.str().c_str());
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
