// tests/mpi_ddp.cpp: DistributedDataParallel on a small CNN, against one process on the full batch.
//
// N ranks with batch b must take the same SGD steps as one process with batch N*b: the loss is a
// mean over the batch, so the mean of the ranks' gradients is the full batch's gradient. Each rank
// computes that one-process reference itself, on the whole batch, so no separate run is needed.
// The model has no BatchNorm or dropout (their batch statistics / randomness would differ).
// Tolerance 1e-5 relative in f32: the two sides sum the same products in a different order
// (per-rank partial sums, then the all-reduce), a few ulps per step over 3 steps.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "core/random.h"
#include "dist/bootstrap.h"
#include "dist/ddp.h"

using namespace tandem;
using namespace tandem::dist;

namespace {
constexpr int64_t kB = 4;   // per-rank batch
constexpr int kSteps = 3;
constexpr float kLr = 0.1f;

// conv 3x3 (3->4) -> relu -> maxpool 2 -> conv 3x3 (4->6) -> relu -> flatten -> linear (96->10)
struct SmallCnn : Module {
  Tensor c1w, c1b, c2w, c2b, fw, fb;
  explicit SmallCnn(uint64_t seed) {
    Generator g(seed);
    auto param = [&](const char* name, const Shape& s, double scale) {
      Tensor t = randn(s, g);
      ops::scale_(t, static_cast<float>(scale));
      return register_parameter(name, t);
    };
    c1w = param("conv1.weight", {4, 3, 3, 3}, 0.3);
    c1b = param("conv1.bias", {4}, 0.1);
    c2w = param("conv2.weight", {6, 3, 3, 4}, 0.3);
    c2b = param("conv2.bias", {6}, 0.1);
    fw = param("fc.weight", {10, 96}, 0.1);
    fb = param("fc.bias", {10}, 0.1);
  }
  Tensor forward(const Tensor& x) override {
    ops::Conv2dParams same{1, 1, 1, 1};
    Tensor h = ops::relu(ops::conv2d(x, c1w, c1b, same));
    h = ops::max_pool2d(h, {});
    h = ops::relu(ops::conv2d(h, c2w, c2b, same));
    return ops::linear(ops::flatten(h), fw, fb);
  }
  std::string type_name() const override { return "SmallCnn"; }
};

struct Data {
  Tensor x, y;  // the full batch of N * b samples, identical on every rank
};
Data make_data(int world) {
  Generator g(1234);
  Data d{randn({world * kB, 8, 8, 3}, g), Tensor::empty({world * kB}, DType::I64)};
  randint_(d.y, 10, g);
  return d;
}

void sgd_step(Module& m) {
  for (Tensor& p : m.parameters()) ops::axpby_(p, p.grad(), 1.0f, -kLr);
}

void zero_grads(Module& m) {
  for (Tensor& p : m.parameters())
    if (p.grad().defined()) p.grad().zero_();
}

double max_rel_diff(Module& a, Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector(), vb = pb[i].to_vector();
    for (size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::abs(double(va[j]) - vb[j]) / std::max(1e-3, std::abs(double(vb[j]))));
  }
  return worst;
}

// Trains a DDP replica and the local full-batch reference side by side; returns the DDP model.
std::shared_ptr<SmallCnn> train(const ReducerOptions& ro) {
  const World& w = world();
  Data d = make_data(w.size);
  auto ref = std::make_shared<SmallCnn>(7);
  auto model = std::make_shared<SmallCnn>(7 + 100 * w.rank);  // DDP must broadcast rank 0's weights
  DdpOptions o;
  o.reducer = ro;
  auto ddp = std::make_unique<DistributedDataParallel>(model, o);
  Tensor xs = d.x.slice(w.rank * kB, (w.rank + 1) * kB), ys = d.y.slice(w.rank * kB, (w.rank + 1) * kB);
  for (int step = 0; step < kSteps; ++step) {
    zero_grads(*model);
    ops::cross_entropy((*ddp)(xs), ys).backward();
    sgd_step(*model);
    zero_grads(*ref);
    ops::cross_entropy((*ref)(d.x), d.y).backward();
    sgd_step(*ref);
  }
  double diff = max_rel_diff(*model, *ref);
  CHECK(diff <= 1e-5);
  return model;
}

// Every rank's parameters, bit for bit, equal rank 0's.
bool bit_identical(Module& m) {
  std::string mine;
  for (Tensor& p : m.parameters()) mine.append(static_cast<const char*>(p.data_ptr()), p.nbytes());
  std::vector<std::string> all = all_gather_strings(mine);
  for (const std::string& s : all)
    if (s != all[0]) return false;
  return true;
}
}  // namespace

TEST_CASE("N ranks x batch b == 1 process x batch N*b; ranks stay bit-identical") {
  for (bool bucketed : {true, false})
    for (bool overlap : {true, false}) {
      CAPTURE(bucketed);
      CAPTURE(overlap);
      ReducerOptions ro;
      ro.bucketing = {256, 1024};  // several buckets even in this tiny model
      ro.bucketed = bucketed;
      ro.overlap = overlap;
      auto model = train(ro);
      CHECK(bit_identical(*model));
    }
}

TEST_CASE("default bucket sizes put the tiny model in one bucket, and it still matches") {
  auto model = train({});
  CHECK(bit_identical(*model));
}

// Deep enough that backward takes milliseconds: the first buckets' all-reduces can start while
// the earlier layers' gradients are still being computed.
struct DeepCnn : Module {
  std::vector<Tensor> w;
  DeepCnn() {
    Generator g(3);
    for (int i = 0; i < 8; ++i) {
      Tensor t = randn({32, 3, 3, i == 0 ? 3 : 32}, g);
      ops::scale_(t, 0.05f);
      w.push_back(register_parameter("conv" + std::to_string(i) + ".weight", t));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (Tensor& wi : w) h = ops::relu(ops::conv2d(h, wi, Tensor(), {1, 1, 1, 1}));
    return h;
  }
  std::string type_name() const override { return "DeepCnn"; }
};

TEST_CASE("overlap is real: with many buckets, some all-reduce starts before backward ends") {
  DdpOptions o;
  o.reducer.bucketing = {64, 64};  // one bucket per parameter
  DistributedDataParallel ddp(std::make_shared<DeepCnn>(), o);
  Generator g(5);
  Tensor x = randn({2, 24, 24, 3}, g);
  for (int step = 0; step < kSteps; ++step) {
    zero_grads(ddp.module());
    ops::mean(ddp(x)).backward();
  }
  bool early = false;
  for (const StepTiming& s : ddp.timeline().steps()) {
    CHECK(s.buckets.size() == 8);
    for (const BucketTiming& b : s.buckets) early = early || b.launch_us < s.backward_end_us;
  }
  CHECK(early);
  TimelineSummary sum = ddp.timeline().summary();
  CHECK(sum.steps == kSteps - 1);
  CHECK(sum.overlap > 0.0);
  MESSAGE("rank ", world().rank, ": ", sum.str());
}

TEST_CASE("model check passes for identical models and names the parameter that differs") {
  SmallCnn same(1);
  check_same_model(same);  // no throw
}
