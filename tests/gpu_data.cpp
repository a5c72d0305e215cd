// tests/gpu_data.cpp: the loader's CUDA path - pinned staging, async copies on the compute stream,
// fence-guarded buffer reuse - must deliver exactly the CPU loader's batches. Skipped without a GPU.
#include <doctest/doctest.h>

#include "data/loader.h"
#include "data/pinned.h"
#include "data/synthetic.h"

using namespace tandem;
using namespace tandem::data;

TEST_CASE("pinned host buffers are page-locked when a GPU is present") {
  HostBuffer pinned(1 << 20, true), plain(1 << 20, false);
  CHECK(pinned.pinned());
  CHECK_FALSE(plain.pinned());
  CHECK(reinterpret_cast<uintptr_t>(plain.data()) % 64 == 0);
}

TEST_CASE("CUDA loader: bit-identical to the CPU loader, for pinned and pageable staging") {
  // More batches than prefetch slots, so every staging buffer is reused behind its fence.
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{96, 10, 16, 2});
  LoaderOptions cpu;
  cpu.batch_size = 8;
  cpu.num_workers = 3;
  cpu.seed = 4;
  for (bool pin : {true, false}) {
    LoaderOptions gpu = cpu;
    gpu.device = Device::cuda(0);
    gpu.pin_memory = pin;
    Loader a(ds, cpu), b(ds, gpu);
    for (int64_t epoch : {0, 1}) {
      a.start_epoch(epoch);
      b.start_epoch(epoch);
      Batch x, y;
      int n = 0;
      while (a.next(x)) {
        REQUIRE(b.next(y));
        CHECK(y.images.is_cuda());
        CHECK(y.labels.is_cuda());
        CHECK(y.images.shape() == x.images.shape());
        CHECK(y.images.to_vector() == x.images.to_vector());
        CHECK(y.labels.to_vector_i64() == x.labels.to_vector_i64());
        ++n;
      }
      CHECK_FALSE(b.next(y));
      CHECK(n == 12);
    }
  }
}

TEST_CASE("CUDA loader: resident mode keeps one device batch") {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticOptions{64, 10, 8, 0});
  LoaderOptions o;
  o.batch_size = 16;
  o.device = Device::cuda(0);
  o.resident = true;
  Loader loader(ds, o);
  Batch first, b;
  REQUIRE(loader.next(first));
  CHECK(first.images.is_cuda());
  while (loader.next(b)) CHECK(b.images.shares_storage(first.images));
}
