// tests/support/reducer_cases.cpp: see reducer_cases.h.
#include "tests/support/reducer_cases.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops/elementwise/elementwise.h"

namespace tandem::testing::reducer_cases {
using namespace tandem::dist;

Toy::Toy(int count) {
  for (int i = 0; i < count; ++i) {
    Tensor p = Tensor::full({static_cast<int64_t>(100 + 37 * i)}, 0.5);  // 400 .. 1.9 KB
    p.set_requires_grad(true);
    params.emplace_back("p" + std::to_string(i), p);
  }
}

void Toy::backward(int rank, const std::vector<size_t>& skip) {
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

void Toy::zero_grad() {
  for (auto& [n, p] : params) p.grad().zero_();
}

int Toy::mismatches(int n, float factor, float tol, const std::vector<size_t>& skip) const {
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

ReducerOptions small_buckets() {
  ReducerOptions o;
  o.bucketing = {1000, 3000};
  return o;
}

void check_averaged(Communicator& c) {
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

void check_zero_grad(Communicator& c) {
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

void check_no_sync(Communicator& c) {
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

void check_unused(Communicator& c) {
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

void check_hooks_removed(Communicator& c) {
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

void check_compression(Communicator& c) {
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

void check_timeline_order(Communicator& c) {
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

}  // namespace tandem::testing::reducer_cases
