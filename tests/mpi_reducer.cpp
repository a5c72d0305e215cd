// tests/mpi_reducer.cpp: the reducer on raw leaf tensors over MPI, a process a rank. The bodies are
// tests/support/reducer_cases.h's, shared with tests/test_reducer.cpp, which runs them with ranks as
// threads of one process; the timeline and trace cases below are this file's own.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/profile.h"
#include "dist/transport/bootstrap.h"
#include "tests/support/reducer_cases.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::reducer_cases;

namespace {
Communicator& mpi() { return comm_for(Device::cpu()); }
}  // namespace

TEST_CASE("gradients are averaged over ranks: bucketed/unbucketed, overlap on/off") { check_averaged(mpi()); }
TEST_CASE("Reducer::zero_grad: one memset per bucket, then backward copies in; same gradients as per-parameter zeroing") {
  check_zero_grad(mpi());
}
TEST_CASE("no_sync accumulates locally; the next synchronised backward averages the sum") { check_no_sync(mpi()); }
TEST_CASE("unused parameters: named in the error by default, zero with find_unused_parameters") {
  check_unused(mpi());
}
TEST_CASE("a destroyed reducer removes its hooks: reducers built in a loop leave none behind") {
  check_hooks_removed(mpi());
}
TEST_CASE("gradient compression: bf16 and f16 on the wire") { check_compression(mpi()); }
TEST_CASE("timeline: every bucket has ready <= launch <= finish") { check_timeline_order(mpi()); }

TEST_CASE("compute_overlap: exposed is the communication after backward ended") {
  StepTiming s;
  s.backward_end_us = 100;
  s.buckets = {{10, 20, 50, 0}, {30, 40, 60, 0}, {90, 95, 130, 0}};  // union [20,60] + [95,130]
  compute_overlap(s);
  CHECK(s.comm_us == doctest::Approx(75));
  CHECK(s.exposed_us == doctest::Approx(30));
  CHECK(s.overlap == doctest::Approx(45.0 / 75));
}

namespace {
// A GPU-like mark: complete() is false until the test says the "GPU" got there; us_since counts the
// reads, and a read of an incomplete mark counts as a host wait (the thing the timeline must avoid).
struct FakeMark final : Mark {
  double t;
  std::shared_ptr<bool> reached;
  int* reads;
  int* waits;
  FakeMark(double t_, std::shared_ptr<bool> r, int* rd, int* w) : t(t_), reached(std::move(r)), reads(rd), waits(w) {}
  bool complete() const override { return *reached; }
  double us_since(const Mark& o) const override {
    ++*reads;
    if (!*reached || !*static_cast<const FakeMark&>(o).reached) ++*waits;
    return t - static_cast<const FakeMark&>(o).t;
  }
};
}  // namespace

TEST_CASE("Timeline::end_step never waits for the GPU: it resolves completed steps, one step behind") {
  Timeline tl;
  int waits = 0;
  std::vector<std::shared_ptr<bool>> reached;
  std::vector<int> reads(4, 0);
  auto step = [&](int k) {
    reached.push_back(std::make_shared<bool>(false));
    tl.start_step(std::make_shared<FakeMark>(0, reached[k], &reads[k], &waits));
    tl.end_step(std::make_shared<FakeMark>(10, reached[k], &reads[k], &waits));
  };
  step(0);
  step(1);
  CHECK(reads[0] == 0);  // step 0 not reached by the "GPU": left pending
  *reached[0] = true;
  step(2);
  CHECK(reads[0] > 0);    // step 0 complete and no longer the newest: resolved
  CHECK(reads[1] == 0);   // step 1 not reached
  *reached[1] = *reached[2] = true;
  step(3);
  CHECK(reads[2] > 0);
  CHECK(reads[3] == 0);   // the newest step is never read at end_step, even when complete
  CHECK(waits == 0);
  *reached[3] = true;
  REQUIRE(tl.steps().size() == 4);  // steps() resolves the rest (and may wait: it is for reports)
  CHECK(tl.steps()[3].backward_end_us == doctest::Approx(10));
}

TEST_CASE("write_trace: one Chrome trace on rank 0, a process per rank, bucket all-reduces on track 1") {
  Communicator& c = mpi();
  profile::take_events();  // start clean
  profile::enable_trace(profile::Level::Step);
  Toy toy;
  Reducer red(toy.params, c, small_buckets());
  toy.step(c.rank());
  red.timeline().steps();  // resolving the timings adds the bucket events
  const std::string path = "dist_trace_test_" + std::to_string(c.size()) + ".json";
  write_trace(path, c);
  profile::disable_trace();
  if (c.rank() == 0) {
    std::ifstream f(path);
    REQUIRE(f.good());
    nlohmann::json j = nlohmann::json::parse(f);
    std::set<int> pids_with_buckets;
    for (const auto& e : j["traceEvents"])
      if (e["ph"] == "X" && e["name"] == "allreduce bucket 0" && e["tid"] == 1) pids_with_buckets.insert(e["pid"].get<int>());
    CHECK(pids_with_buckets.size() == static_cast<size_t>(c.size()));
    std::remove(path.c_str());
  }
}
