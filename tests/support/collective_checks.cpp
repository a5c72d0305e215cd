// tests/support/collective_checks.cpp: see collective_checks.h.
#include "tests/support/collective_checks.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops/elementwise/elementwise.h"
#include "tests/support/collective_values.h"

namespace tandem::testing {
namespace {
using dist::Communicator;
using dist::ReduceOp;
using dist::WorkPtr;

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
// Odd sizes (no reliance on alignment), and one of 2^18 + 3 elements: NCCL splits it into several
// chunks and channels, host staging copies 1 MiB each way.
const int64_t kSizes[] = {1, 7, 1023, 4099, (int64_t{1} << 18) + 3};

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
}  // namespace

void check_all_reduce(Communicator& c, Device device) {
  const int n = c.size(), r = c.rank();
  const double avg_rel = power_of_two(n) ? 0 : 1.0 / 256;
  for (DType t : kDtypes)
    for (int64_t size : kSizes) {
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      CAPTURE(size);
      Tensor s = rank_tensor(size, t, r, device), a = rank_tensor(size, t, r, device);
      WorkPtr ws = c.all_reduce(s, ReduceOp::Sum), wa = c.all_reduce(a, ReduceOp::Avg);  // two in flight
      ws->wait();
      wa->wait();
      if (device.is_cpu()) CHECK(ws->done());  // MPI's wait() returns when the collective finished
      CHECK(s.device() == device);
      std::vector<float> vs = s.to_vector(), va = a.to_vector();  // to_vector syncs the compute stream
      CHECK(ws->done());  // ...which waited for the collective, on every backend
      CHECK(wa->done());
      CHECK(mismatches(vs, [&](int64_t i) { return k_of(i) * n * (n + 1) / 2.0; }) == 0);
      CHECK(mismatches(va, [&](int64_t i) { return k_of(i) * (n + 1) / 2.0; }, avg_rel) == 0);
    }
}

void check_all_reduce_view(Communicator& c, Device device) {
  // Staging must copy back into the view's bytes, NCCL and MPI must use the view's offset.
  const int n = c.size(), r = c.rank();
  const int64_t len = 1001, lead = 3, tail = 5;
  for (DType t : kDtypes) {
    const std::string dt = dtype_name(t);
    CAPTURE(dt);
    Tensor buf = Tensor::full({lead + len + tail}, -1.0, t, device);
    Tensor mid = buf.slice(lead, lead + len);
    mid.copy_(rank_tensor(len, t, r, device));
    c.all_reduce(mid, ReduceOp::Sum)->wait();
    std::vector<float> v = buf.to_vector();
    CHECK(mismatches(v, [&](int64_t i) {
      return i < lead || i >= lead + len ? -1.0 : k_of(i - lead) * n * (n + 1) / 2.0;
    }) == 0);
  }
}

void check_stream_handoff(Communicator& c, Device device) {
  // scale_ by 2 is enqueued on the compute stream right before the all-reduce; scale_ by 0.25
  // right after wait(). A collective that read its input early would sum the unscaled values; a
  // wait() that did not order the compute stream would let the second kernel scale the input.
  const int n = c.size(), r = c.rank();
  const int64_t size = int64_t{1} << 20;  // 4 MiB: the kernels take long enough for a race to show
  for (int rep = 0; rep < 3; ++rep) {
    Tensor x = rank_tensor(size, DType::F32, r, device);
    ops::scale_(x, 2.0f);
    WorkPtr wk = c.all_reduce(x, ReduceOp::Sum);
    wk->wait();
    ops::scale_(x, 0.25f);
    CHECK(mismatches(x.to_vector(), [&](int64_t i) { return k_of(i) * n * (n + 1) / 4.0; }) == 0);
  }
}

void check_reduce_scatter(Communicator& c, Device device) {
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes)
    for (int64_t chunk : {int64_t{1}, int64_t{333}}) {
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      CAPTURE(chunk);
      Tensor in = rank_tensor(chunk * n, t, r, device), out = Tensor::empty({chunk}, t, device);
      c.reduce_scatter(in, out, ReduceOp::Sum)->wait();
      CHECK(out.device() == device);
      CHECK(mismatches(out.to_vector(), [&](int64_t i) { return k_of(r * chunk + i) * n * (n + 1) / 2.0; }) == 0);
    }
}

void check_all_gather(Communicator& c, Device device) {
  const int n = c.size(), r = c.rank();
  for (DType t : kDtypes) {
    const std::string dt = dtype_name(t);
    CAPTURE(dt);
    const int64_t len = 5;
    Tensor in = rank_tensor(len, t, r, device), out = Tensor::empty({len * n}, t, device);
    c.all_gather(in, out)->wait();
    CHECK(mismatches(out.to_vector(), [&](int64_t i) { return (i / len + 1) * k_of(i % len); }) == 0);
  }
}

void check_broadcast_and_barrier(Communicator& c, Device device) {
  for (int root = 0; root < c.size(); ++root)
    for (DType t : kDtypes) {
      CAPTURE(root);
      const std::string dt = dtype_name(t);
      CAPTURE(dt);
      Tensor x = rank_tensor(9, t, c.rank(), device);
      c.broadcast(x, root)->wait();
      CHECK(x.to_vector() == rank_tensor(9, t, root).to_vector());
    }
  c.barrier()->wait();
}

void check_refusals(Communicator& c, Device device) {
  Tensor in = Tensor::zeros({c.size() * 2 + 1}, DType::F32, device), out = Tensor::zeros({2}, DType::F32, device);
  CHECK_THROWS(c.reduce_scatter(in, out));
  Tensor small = Tensor::zeros({1}, DType::F32, device);
  CHECK_THROWS(c.all_gather(in, small));
  Tensor i64 = Tensor::from_vector_i64({1}, {1}, DType::I64, device);
  CHECK_THROWS(c.all_reduce(i64));
  CHECK_THROWS(c.broadcast(small, c.size()));  // no such root
  // NCCL only takes tensors on its own GPU (the host-staged MPI communicator also serves CPU tensors).
  if (std::strcmp(c.backend(), "nccl") == 0) {
    Tensor host = Tensor::zeros({4});
    CHECK_THROWS(c.all_reduce(host));
  }
  c.barrier()->wait();  // every rank is still in step after the refusals
}

}  // namespace tandem::testing
