// tests/support/main.cpp: doctest main for single-process tests.
// A test compiled with TANDEM_TEST_REQUIRES_GPU exits 77 (ctest: Skipped) when no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
#ifdef TANDEM_TEST_REQUIRES_GPU
  if (!tandem::cuda_available()) {
    std::printf("SKIPPED: no CUDA device visible (%s)\n",
                tandem::built_with_cuda() ? "built with CUDA" : "CPU-only build");
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
