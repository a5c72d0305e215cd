// tests/mpi_collectives.cpp: every collective on the CPU (MPI) path, against closed forms.
// Rank r contributes values that depend on r, so the expected result is a formula in the world
// size n: sum over ranks of (r + 1) * k = k * n (n + 1) / 2 (tests/support/collective_values.h).
// Values are small integers or halves, exact in f16 and bf16, so every dtype is checked for
// equality, not within a tolerance. tests/mpi_gpu_collectives.cpp does the same on GPU tensors.
#include <doctest/doctest.h>

#include "dist/bootstrap.h"
#include "tests/support/collective_values.h"

using namespace tandem;
using namespace tandem::dist;
using testing::k_of;
using testing::rank_tensor;

namespace {
const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
const int64_t kSizes[] = {1, 7, 1023, 4099};  // odd sizes: no reliance on alignment or chunking
}  // namespace

TEST_CASE("all_reduce sum and avg: closed form, every dtype, odd sizes") {
  Communicator& c = comm_for(Device::cpu());
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes)
    for (int64_t size : kSizes) {
      CAPTURE(dtype_name(t));
      CAPTURE(size);
      Tensor s = rank_tensor(size, t, r), a = rank_tensor(size, t, r);
      WorkPtr ws = c.all_reduce(s, ReduceOp::Sum), wa = c.all_reduce(a, ReduceOp::Avg);  // two in flight
      ws->wait();
      wa->wait();
      CHECK(ws->done());
      std::vector<float> vs = s.to_vector(), va = a.to_vector();
      int bad = 0;
      for (int64_t i = 0; i < size; ++i) {
        bad += vs[i] != k_of(i) * n * (n + 1) / 2;
        bad += va[i] != k_of(i) * (n + 1) / 2.0f;
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("reduce_scatter: rank r gets chunk r of the sum") {
  Communicator& c = comm_for(Device::cpu());
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes)
    for (int64_t chunk : {int64_t{1}, int64_t{333}}) {
      CAPTURE(dtype_name(t));
      Tensor in = rank_tensor(chunk * n, t, r), out = Tensor::empty({chunk}, t);
      c.reduce_scatter(in, out, ReduceOp::Sum)->wait();
      std::vector<float> v = out.to_vector();
      int bad = 0;
      for (int64_t i = 0; i < chunk; ++i) bad += v[i] != k_of(r * chunk + i) * n * (n + 1) / 2;
      CHECK(bad == 0);
    }
}

TEST_CASE("all_gather: chunk q is rank q's input") {
  Communicator& c = comm_for(Device::cpu());
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    const int64_t len = 5;
    Tensor in = rank_tensor(len, t, r), out = Tensor::empty({len * n}, t);
    c.all_gather(in, out)->wait();
    std::vector<float> v = out.to_vector();
    int bad = 0;
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < len; ++i) bad += v[q * len + i] != (q + 1) * k_of(i);
    CHECK(bad == 0);
  }
}

TEST_CASE("broadcast from every root, and barrier") {
  Communicator& c = comm_for(Device::cpu());
  for (int root = 0; root < c.size(); ++root)
    for (DType t : kDtypes) {
      Tensor x = rank_tensor(9, t, c.rank());
      c.broadcast(x, root)->wait();
      CHECK(x.to_vector() == rank_tensor(9, t, root).to_vector());
    }
  c.barrier()->wait();
}

TEST_CASE("all_gather_strings returns every rank's string in rank order") {
  std::string mine(static_cast<size_t>(world().rank * 3 + 1), static_cast<char>('a' + world().rank));
  std::vector<std::string> all = all_gather_strings(mine);
  REQUIRE(all.size() == static_cast<size_t>(world().size));
  for (int q = 0; q < world().size; ++q)
    CHECK(all[q] == std::string(static_cast<size_t>(q * 3 + 1), static_cast<char>('a' + q)));
}

TEST_CASE("wrong sizes are refused before anything is sent") {
  Communicator& c = comm_for(Device::cpu());
  Tensor in = Tensor::zeros({c.size() * 2 + 1}), out = Tensor::zeros({2});
  CHECK_THROWS(c.reduce_scatter(in, out));
  Tensor i64 = Tensor::from_vector_i64({1}, {1});
  CHECK_THROWS(c.all_reduce(i64));
}

TEST_CASE("world: local rank and device come from init") {
  const World& w = world();
  CHECK(w.rank == comm_for(Device::cpu()).rank());
  CHECK(w.size == comm_for(Device::cpu()).size());
  CHECK(w.local_rank >= 0);
  CHECK(w.local_rank < w.local_size);
  CHECK(error_rank() == w.rank);
}
