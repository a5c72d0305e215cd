// tests/mpi_gpu_collectives.cpp: every collective on GPU tensors, against closed forms.
//
// The GPU twin of tests/mpi_collectives.cpp, on world().device: NCCL when each rank has its own
// GPU (ctest's _np1 entry is NCCL with one rank), MPI through host memory when ranks share a GPU
// (bootstrap switches by itself) or TANDEM_HOST_STAGING=1 (the _np2_staged entry). Rank r holds
// (r + 1) * k(i) (tests/support/collective_values.h), so sums, averages and gathers have closed
// forms that are exact in f32, f16 and bf16: results are compared for equality. One exception:
// NCCL may average by pre-multiplying with 1/n, inexact when n is not a power of two, so then the
// average gets one rounding of the dtype (2^-8 relative covers bf16); ctest runs n = 1, 2, 4.
// Also checked: results stay on the GPU, a view inside a larger buffer is reduced in place without
// touching its neighbours, and the hand-off to and from the compute stream (a kernel writes the
// input right before the collective and another reads the result right after wait()).
// Exits 77 on every rank without a GPU (tests/support/mpi_main.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ops/elementwise.h"
#include "dist/bootstrap.h"
#include "tests/support/collective_values.h"

using namespace tandem;
using namespace tandem::dist;
using testing::k_of;
using testing::rank_tensor;

namespace {
const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
// Odd sizes (no reliance on alignment), and one of 2^18 + 3 elements: NCCL splits it into several
// chunks and channels, host staging copies 1 MiB each way.
const int64_t kSizes[] = {1, 7, 1023, 4099, (int64_t{1} << 18) + 3};

Device gpu() { return world().device; }
Communicator& comm() { return comm_for(gpu()); }

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Elements of `got` further than rel * |want| from want(i); NaN counts as a mismatch.
template <typename F>
int mismatches(const std::vector<float>& got, F want, double rel = 0) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(static_cast<int64_t>(i));
    bad += !(std::abs(got[i] - w) <= rel * std::abs(w));
  }
  return bad;
}

bool staging_forced() {
  const char* s = std::getenv("TANDEM_HOST_STAGING");
  return s && std::atoi(s) != 0;
}
}  // namespace

TEST_CASE("backend: NCCL when each rank has its own GPU, host-staged MPI when they share one") {
  const World& w = world();
  REQUIRE(w.device.is_cuda());
  const int gpus = cuda_device_count();
  CHECK(w.device.index == w.local_rank % gpus);
  const bool staged = staging_forced() || w.local_size > gpus;
  CHECK(w.options.host_staging == staged);
  CHECK(std::strcmp(comm().backend(), staged ? "mpi+host-staging" : "nccl") == 0);
  CHECK(comm().rank() == w.rank);
  CHECK(comm().size() == w.size);
  if (w.rank == 0) MESSAGE(w.size, " rank(s), ", gpus, " GPU(s) visible, backend ", std::string(comm().backend()));
}

TEST_CASE("all_reduce sum and avg on the GPU: closed form, every dtype, odd sizes") {
  Communicator& c = comm();
  const int n = c.size(), r = c.rank();
  const double avg_rel = power_of_two(n) ? 0 : 1.0 / 256;
  for (DType t : kDtypes)
    for (int64_t size : kSizes) {
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      CAPTURE(size);
      Tensor s = rank_tensor(size, t, r, gpu()), a = rank_tensor(size, t, r, gpu());
      WorkPtr ws = c.all_reduce(s, ReduceOp::Sum), wa = c.all_reduce(a, ReduceOp::Avg);  // two in flight
      ws->wait();
      wa->wait();
      CHECK(s.is_cuda());
      CHECK(s.device() == gpu());
      std::vector<float> vs = s.to_vector(), va = a.to_vector();  // to_vector syncs the compute stream
      CHECK(ws->done());  // ...which waited for the collective, on both backends
      CHECK(wa->done());
      CHECK(mismatches(vs, [&](int64_t i) { return k_of(i) * n * (n + 1) / 2.0; }) == 0);
      CHECK(mismatches(va, [&](int64_t i) { return k_of(i) * (n + 1) / 2.0; }, avg_rel) == 0);
    }
}

TEST_CASE("all_reduce of a view reduces the view in place and leaves its neighbours alone") {
  // DDP's buckets are flat buffers and gradients are views into them: staging must copy back into
  // the view's bytes, NCCL must use the view's offset.
  Communicator& c = comm();
  const int n = c.size(), r = c.rank();
  const int64_t len = 1001, lead = 3, tail = 5;
  for (DType t : kDtypes) {
    const std::string dt = dtype_name(t);
    CAPTURE(dt);
    Tensor buf = Tensor::full({lead + len + tail}, -1.0, t, gpu());
    Tensor mid = buf.slice(lead, lead + len);
    mid.copy_(rank_tensor(len, t, r, gpu()));
    c.all_reduce(mid, ReduceOp::Sum)->wait();
    std::vector<float> v = buf.to_vector();
    CHECK(mismatches(v, [&](int64_t i) {
      return i < lead || i >= lead + len ? -1.0 : k_of(i - lead) * n * (n + 1) / 2.0;
    }) == 0);
  }
}

TEST_CASE("stream hand-off: a kernel's output goes in, the next kernel sees the result") {
  // scale_ by 2 is enqueued on the compute stream right before the all-reduce; scale_ by 0.25
  // right after wait(). A collective that read its input early would sum the unscaled values; a
  // wait() that did not order the compute stream would let the second kernel scale the input.
  Communicator& c = comm();
  const int n = c.size(), r = c.rank();
  const int64_t size = int64_t{1} << 20;  // 4 MiB: the kernels take long enough for a race to show
  for (int rep = 0; rep < 3; ++rep) {
    Tensor x = rank_tensor(size, DType::F32, r, gpu());
    ops::scale_(x, 2.0f);
    WorkPtr wk = c.all_reduce(x, ReduceOp::Sum);
    wk->wait();
    ops::scale_(x, 0.25f);
    CHECK(mismatches(x.to_vector(), [&](int64_t i) { return k_of(i) * n * (n + 1) / 4.0; }) == 0);
  }
}

TEST_CASE("reduce_scatter on the GPU: rank r gets chunk r of the sum") {
  Communicator& c = comm();
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes)
    for (int64_t chunk : {int64_t{1}, int64_t{333}}) {
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      CAPTURE(chunk);
      Tensor in = rank_tensor(chunk * n, t, r, gpu()), out = Tensor::empty({chunk}, t, gpu());
      c.reduce_scatter(in, out, ReduceOp::Sum)->wait();
      CHECK(out.is_cuda());
      CHECK(mismatches(out.to_vector(), [&](int64_t i) { return k_of(r * chunk + i) * n * (n + 1) / 2.0; }) == 0);
    }
}

TEST_CASE("all_gather on the GPU: chunk q is rank q's input") {
  Communicator& c = comm();
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes) {
    const std::string dt = dtype_name(t);
    CAPTURE(dt);
    const int64_t len = 5;
    Tensor in = rank_tensor(len, t, r, gpu()), out = Tensor::empty({len * n}, t, gpu());
    c.all_gather(in, out)->wait();
    CHECK(mismatches(out.to_vector(), [&](int64_t i) { return (i / len + 1) * k_of(i % len); }) == 0);
  }
}

TEST_CASE("broadcast on the GPU from every root, and barrier") {
  Communicator& c = comm();
  for (int root = 0; root < c.size(); ++root)
    for (DType t : kDtypes) {
      CAPTURE(root);
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      Tensor x = rank_tensor(9, t, c.rank(), gpu());
      c.broadcast(x, root)->wait();
      CHECK(x.to_vector() == rank_tensor(9, t, root).to_vector());
    }
  c.barrier()->wait();
}

TEST_CASE("wrong sizes and wrong devices are refused before anything is sent") {
  Communicator& c = comm();
  Tensor in = Tensor::zeros({c.size() * 2 + 1}, DType::F32, gpu()), out = Tensor::zeros({2}, DType::F32, gpu());
  CHECK_THROWS(c.reduce_scatter(in, out));
  Tensor small = Tensor::zeros({1}, DType::F32, gpu());
  CHECK_THROWS(c.all_gather(in, small));
  // NCCL only takes tensors on its own GPU (the host-staged MPI communicator also serves CPU tensors).
  if (std::strcmp(c.backend(), "nccl") == 0) {
    Tensor host = Tensor::zeros({4});
    CHECK_THROWS(c.all_reduce(host));
  }
  c.barrier()->wait();  // every rank is still in step after the refusals
}
