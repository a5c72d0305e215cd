// tests/mpi_reducer.cpp: the reducer on raw leaf tensors and elementwise ops (no layers needed).
// Rank r's "loss" is sum_i p_i * x_i with x = (r + 1) * k, so d loss / d p = (r + 1) * k and the
// averaged gradient is k (n + 1) / 2 - exact in f32 for these small values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/profile.h"
#include "core/ops/elementwise.h"
#include "dist/bootstrap.h"
#include "dist/reducer.h"

using namespace tandem;
using namespace tandem::dist;

namespace {
struct Toy {
  std::vector<std::pair<std::string, Tensor>> params;
  explicit Toy(int count = 12) {
    for (int i = 0; i < count; ++i) {
      Tensor p = Tensor::full({static_cast<int64_t>(100 + 37 * i)}, 0.5);  // 400 .. 1.9 KB
      p.set_requires_grad(true);
      params.emplace_back("p" + std::to_string(i), p);
    }
  }
  float k(size_t param, int64_t j) const { return static_cast<float>((param + j) % 4 + 1); }
  // One backward over every parameter's contribution (roots y_i = p_i * x_i, seed gradient 1).
  // Parameters in `skip` take no part: they are "unused" in this backward.
  void backward(int rank, const std::vector<size_t>& skip = {}) {
    std::vector<Tensor> roots, seeds;
    for (size_t i = 0; i < params.size(); ++i) {
      if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
      std::vector<float> x(params[i].second.numel());
      for (size_t j = 0; j < x.size(); ++j) x[j] = (rank + 1) * k(i, j);
      roots.push_back(ops::mul(params[i].second, Tensor::from_vector(x, {static_cast<int64_t>(x.size())})));
      seeds.push_back(Tensor::ones(roots.back().shape()));
    }
    autograd::backward(roots, seeds);
  }
  void zero_grad() {
    for (auto& [n, p] : params) p.grad().zero_();
  }
  void step(int rank) {  // one training step's gradient work: zero, then backward
    zero_grad();
    backward(rank);
  }
  int mismatches(int n, float factor = 1.0f, float tol = 0.0f, const std::vector<size_t>& skip = {}) const {
    int bad = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> g = params[i].second.grad().to_vector();
      const bool unused = std::find(skip.begin(), skip.end(), i) != skip.end();
      for (size_t j = 0; j < g.size(); ++j) {
        float want = unused ? 0.0f : factor * k(i, j) * (n + 1) / 2.0f;
        bad += std::abs(g[j] - want) > tol * std::abs(want);
      }
    }
    return bad;
  }
};

// Several buckets out of Toy's 12 small parameters (5 of them).
ReducerOptions small_buckets() {
  ReducerOptions o;
  o.bucketing = {1000, 3000};
  return o;
}
}  // namespace

TEST_CASE("gradients are averaged over ranks: bucketed/unbucketed, overlap on/off") {
  Communicator& c = comm_for(Device::cpu());
  for (bool bucketed : {true, false})
    for (bool overlap : {true, false}) {
      CAPTURE(bucketed);
      CAPTURE(overlap);
      Toy toy;
      ReducerOptions o = small_buckets();
      o.bucketed = bucketed;
      o.overlap = overlap;
      Reducer red(toy.params, c, o);
      CHECK(red.buckets().size() == (bucketed ? 5u : 12u));
      for (int step = 0; step < 2; ++step) {  // twice: pending counts and views must reset
        toy.step(c.rank());
        CHECK(toy.mismatches(c.size()) == 0);
      }
      // .grad is a view into its bucket, at the offset its locator says
      for (size_t i = 0; i < toy.params.size(); ++i) {
        const VariableLocator& loc = red.locator(i);
        const Bucket& b = red.buckets()[loc.bucket];
        CHECK(toy.params[i].second.grad().shares_storage(b.buffer));
        CHECK(b.params[loc.index] == i);
        CHECK(toy.params[i].second.grad().storage_offset() == b.buffer.storage_offset() + 4 * b.offsets[loc.index]);
      }
      CHECK(red.timeline().steps().size() == 2);
    }
}

TEST_CASE("Reducer::zero_grad: one memset per bucket, then backward copies in; same gradients as per-parameter zeroing") {
  Communicator& c = comm_for(Device::cpu());
  Toy toy;
  Reducer red(toy.params, c, small_buckets());
  toy.step(c.rank());  // leaves the averaged gradients in the buckets: zero_grad must clear them
  for (int step = 0; step < 2; ++step) {
    red.zero_grad();
    for (const Bucket& b : red.buckets()) {
      std::vector<float> v = b.buffer.to_vector();
      CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    }
    const uint64_t copies = autograd::zero_grad_copies();
    toy.backward(c.rank());
    CHECK(autograd::zero_grad_copies() - copies == toy.params.size());  // every accumulation copied
    CHECK(toy.mismatches(c.size()) == 0);
  }
  {  // no_sync: the flag is spent by the first backward, so the second one adds
    red.zero_grad();
    red.set_sync(false);
    const uint64_t copies = autograd::zero_grad_copies();
    toy.backward(c.rank());
    toy.backward(c.rank());
    red.set_sync(true);
    CHECK(autograd::zero_grad_copies() - copies == toy.params.size());
    CHECK(toy.mismatches(1, 2.0f * (c.rank() + 1)) == 0);  // the local sum of two: 2 (r + 1) k
  }
  // A .grad replaced by set_grad is no bucket view: zeroed on its own, and the flag follows it.
  Tensor& p0 = toy.params[0].second;
  p0.set_grad(Tensor::full(p0.shape(), 3.0));
  red.zero_grad();
  CHECK(p0.grad().to_vector() == std::vector<float>(p0.numel(), 0.0f));
}

TEST_CASE("no_sync accumulates locally; the next synchronised backward averages the sum") {
  Communicator& c = comm_for(Device::cpu());
  Toy toy;
  Reducer red(toy.params, c);
  toy.zero_grad();
  red.set_sync(false);
  toy.backward(c.rank());
  toy.backward(c.rank());
  // local only: 2 (r + 1) k, which differs between ranks
  std::vector<float> g = toy.params[0].second.grad().to_vector();
  CHECK(g[0] == 2.0f * (c.rank() + 1) * toy.k(0, 0));
  red.set_sync(true);
  toy.backward(c.rank());
  CHECK(toy.mismatches(c.size(), 3.0f) == 0);  // average of 3 (r + 1) k
}

TEST_CASE("unused parameters: named in the error by default, zero with find_unused_parameters") {
  Communicator& c = comm_for(Device::cpu());
  {
    Toy toy;
    Reducer red(toy.params, c);
    toy.zero_grad();
    std::string msg;
    try {
      toy.backward(c.rank(), {3, 7});
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("p3, p7") != std::string::npos);
    CHECK(msg.find("find_unused_parameters") != std::string::npos);
    toy.step(c.rank());  // the reducer recovers: a full backward works afterwards
    CHECK(toy.mismatches(c.size()) == 0);
  }
  {
    Toy toy;
    ReducerOptions o;
    o.find_unused_parameters = true;
    Reducer red(toy.params, c, o);
    toy.zero_grad();
    toy.backward(c.rank(), {0, 5});
    CHECK(toy.mismatches(c.size(), 1.0f, 0.0f, {0, 5}) == 0);
  }
}

TEST_CASE("a destroyed reducer removes its hooks: reducers built in a loop leave none behind") {
  Communicator& c = comm_for(Device::cpu());
  Toy toy;
  for (int round = 0; round < 3; ++round) {
    Reducer red(toy.params, c);
    for (auto& [name, p] : toy.params) CHECK(p.num_grad_ready_hooks() == 1);  // only this reducer's
    toy.step(c.rank());
    CHECK(toy.mismatches(c.size()) == 0);
    CHECK(red.timeline().steps().size() == 1);
  }
  for (auto& [name, p] : toy.params) CHECK(p.num_grad_ready_hooks() == 0);
  toy.step(c.rank());  // no reducer left: a purely local backward, (r + 1) k
  CHECK(toy.params[0].second.grad().to_vector()[0] == (c.rank() + 1) * toy.k(0, 0));
}

TEST_CASE("gradient compression: bf16 and f16 on the wire") {
  Communicator& c = comm_for(Device::cpu());
  for (Compression comp : {Compression::BF16, Compression::F16}) {
    Toy toy;
    ReducerOptions o;
    o.compression = comp;
    Reducer red(toy.params, c, o);
    toy.step(c.rank());
    // Each rank's (r + 1) k / n is rounded to 16 bits before the sum: bf16 keeps 8 significant
    // bits (relative error <= 2^-8 per rounding), f16 11 bits; a few roundings add up.
    CHECK(toy.mismatches(c.size(), 1.0f, comp == Compression::BF16 ? 2e-2f : 3e-3f) == 0);
    CHECK(red.timeline().steps().back().buckets[0].bytes == red.buckets()[0].buffer.nbytes() / 2);
  }
}

TEST_CASE("timeline: every bucket has ready <= launch <= finish") {
  Communicator& c = comm_for(Device::cpu());
  Toy toy;
  Reducer red(toy.params, c, small_buckets());
  toy.step(c.rank());
  const StepTiming& s = red.timeline().steps().back();
  REQUIRE(s.buckets.size() == red.buckets().size());
  for (const BucketTiming& b : s.buckets) {
    CHECK(b.ready_us <= b.launch_us);
    CHECK(b.launch_us <= b.finish_us);
  }
  CHECK(s.overlap >= 0.0);
  CHECK(s.overlap <= 1.0);
}

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
  Communicator& c = comm_for(Device::cpu());
  profile::take_events();  // start clean
  profile::enable_trace(profile::Level::Step);
  Toy toy;
  Reducer red(toy.params, c, small_buckets());
  toy.step(c.rank());
  red.timeline().steps();  // resolving the timings adds the bucket events
  const std::string path = "dist_trace_test_" + std::to_string(c.size()) + ".json";
  write_trace(path);
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
