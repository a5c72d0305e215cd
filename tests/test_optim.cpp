// tests/test_optim.cpp: SGD against hand-computed PyTorch updates, state round trips, LR schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "core/threads.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

using namespace tandem;
using namespace tandem::optim;

namespace {
// Runs 3 steps on a one-element f64 parameter starting at 1.0 with gradients 0.5, -1, 2 and returns
// the parameter after each step.
std::vector<double> three_steps(const SGDOptions& opt) {
  Tensor p = Tensor::from_vector_f64({1.0}, {1});
  p.set_requires_grad(true);
  SGD sgd({{"w", p}}, opt);
  std::vector<double> out;
  for (double g : {0.5, -1.0, 2.0}) {
    p.set_grad(Tensor::from_vector_f64({g}, {1}));
    sgd.step();
    out.push_back(p.item());
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}
}  // namespace

// Expected values worked by hand from torch.optim.SGD's formulas (see optim/sgd.h), lr = 0.1.
TEST_CASE("SGD momentum + weight decay matches hand-computed steps") {
  // d=0.51 buf=0.51 p=0.949 | d=-0.99051 buf=-0.53151 p=1.002151 | d=2.01002151 buf=1.53166251 p=0.848984749
  check_close(three_steps({0.1, 0.9, 0.0, 0.01, false}), {0.949, 1.002151, 0.848984749});
}

TEST_CASE("SGD nesterov matches hand-computed steps") {
  // buf=0.5 d=0.95 p=0.905 | buf=-0.55 d=-1.495 p=1.0545 | buf=1.505 d=3.3545 p=0.71905
  check_close(three_steps({0.1, 0.9, 0.0, 0.0, true}), {0.905, 1.0545, 0.71905});
}

TEST_CASE("SGD dampening applies from the second step only") {
  // buf=0.5 (first step: buf = d_p) p=0.95 | buf=0.45-0.5=-0.05 p=0.955 | buf=-0.045+1=0.955 p=0.8595
  check_close(three_steps({0.1, 0.9, 0.5, 0.0, false}), {0.95, 0.955, 0.8595});
}

TEST_CASE("SGD without momentum is plain descent on g + wd p") {
  // d=0.6 p=0.94 | d=-0.906 p=1.0306 | d=2.10306 p=0.820294
  check_close(three_steps({0.1, 0.0, 0.0, 0.1, false}), {0.94, 1.0306, 0.820294});
}

TEST_CASE("SGD f32 tensors update elementwise like the scalar case") {
  Tensor p = Tensor::from_vector({1.0f, 2.0f, -3.0f}, {3});
  p.set_requires_grad(true);
  SGD sgd({p}, {0.1, 0.9, 0.0, 0.0, false});
  p.set_grad(Tensor::from_vector({1.0f, 0.0f, -2.0f}, {3}));
  sgd.step();
  sgd.step();  // same gradient: buf = 1.9 g, total step = 0.1 g + 0.19 g
  auto v = p.to_vector();
  CHECK(v[0] == doctest::Approx(1.0 - 0.29));
  CHECK(v[1] == doctest::Approx(2.0));
  CHECK(v[2] == doctest::Approx(-3.0 + 0.58));
  CHECK(sgd.steps() == 2);
}

TEST_CASE("SGD skips parameters without a gradient and keeps no buffer for them") {
  Tensor a = Tensor::from_vector({1.0f}, {1});
  Tensor b = Tensor::from_vector({5.0f}, {1});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  SGD sgd({{"a", a}, {"b", b}}, {0.5, 0.9, 0.0, 0.1, false});
  a.set_grad(Tensor::from_vector({1.0f}, {1}));
  sgd.step();
  CHECK(b.item() == 5.0);  // weight decay must not touch a parameter that had no gradient
  CHECK(a.item() == doctest::Approx(1.0 - 0.5 * 1.1));
  auto st = sgd.state();
  REQUIRE(st.size() == 1);
  CHECK(st[0].first == "a.momentum_buffer");
}

TEST_CASE("SGD state round trip: save after 2 steps, resume in a fresh optimizer, equals 3 straight steps") {
  SGDOptions opt{0.05, 0.9, 0.1, 1e-3, false};
  auto run = [&](bool resume) {
    Tensor p = Tensor::from_vector({0.3f, -0.7f, 1.1f, 2.0f}, {2, 2});
    p.set_requires_grad(true);
    auto sgd = std::make_unique<SGD>(std::vector<std::pair<std::string, Tensor>>{{"layer.weight", p}}, opt);
    std::vector<std::vector<float>> grads{{1, 2, 3, 4}, {-1, 0.5f, 0, 2}, {0.25f, -3, 1, 1}};
    for (int s = 0; s < 3; ++s) {
      if (resume && s == 2) {
        auto saved = sgd->state();
        std::vector<std::pair<std::string, Tensor>> copy;
        for (auto& [n, t] : saved) copy.emplace_back(n, t.clone());
        sgd = std::make_unique<SGD>(std::vector<std::pair<std::string, Tensor>>{{"layer.weight", p}}, opt);
        sgd->load_state(copy);
      }
      p.set_grad(Tensor::from_vector(grads[s], {2, 2}));
      sgd->step();
    }
    return p.to_vector();
  };
  CHECK(run(true) == run(false));  // bit-identical: same arithmetic in the same order
}

TEST_CASE("SGD rejects bad options and unknown state names") {
  Tensor p = Tensor::zeros({1});
  p.set_requires_grad(true);
  CHECK_THROWS_AS(SGD({p}, {0.1, 0.0, 0.0, 0.0, true}), Error);  // nesterov without momentum
  CHECK_THROWS_AS(SGD({p}, {-1.0}), Error);
  SGD sgd({{"w", p}}, {0.1, 0.9});
  CHECK_THROWS_AS(sgd.load_state({{"v.momentum_buffer", Tensor::zeros({1})}}), Error);
  CHECK_THROWS_AS(sgd.load_state({{"w.momentum_buffer", Tensor::zeros({2})}}), Error);
}

TEST_CASE("LR warmup then constant") {
  LrScheduleOptions o;
  o.base_lr = 0.4;
  o.warmup_steps = 4;
  CHECK(lr_at(o, 0) == doctest::Approx(0.0));
  CHECK(lr_at(o, 1) == doctest::Approx(0.1));
  CHECK(lr_at(o, 3) == doctest::Approx(0.3));
  CHECK(lr_at(o, 4) == doctest::Approx(0.4));
  CHECK(lr_at(o, 1000) == doctest::Approx(0.4));
  o.warmup_start_factor = 0.5;
  CHECK(lr_at(o, 0) == doctest::Approx(0.2));
  CHECK(lr_at(o, 2) == doctest::Approx(0.3));
}

TEST_CASE("LR step decay at milestones") {
  LrScheduleOptions o;
  o.base_lr = 0.4;
  o.decay = LrDecay::Step;
  o.milestones = {10, 20};
  o.gamma = 0.1;
  CHECK(lr_at(o, 9) == doctest::Approx(0.4));
  CHECK(lr_at(o, 10) == doctest::Approx(0.04));
  CHECK(lr_at(o, 19) == doctest::Approx(0.04));
  CHECK(lr_at(o, 20) == doctest::Approx(0.004));
  o.milestones = {20, 10};
  CHECK_THROWS_AS(lr_at(o, 5), Error);
}

TEST_CASE("LR cosine after warmup") {
  LrScheduleOptions o;
  o.base_lr = 0.4;
  o.decay = LrDecay::Cosine;
  o.total_steps = 100;
  CHECK(lr_at(o, 0) == doctest::Approx(0.4));
  CHECK(lr_at(o, 25) == doctest::Approx(0.4 * (1 + std::cos(M_PI / 4)) / 2));
  CHECK(lr_at(o, 50) == doctest::Approx(0.2));
  CHECK(lr_at(o, 100) == doctest::Approx(0.0));
  CHECK(lr_at(o, 150) == doctest::Approx(0.0));
  o.warmup_steps = 10;
  o.min_lr = 0.04;
  CHECK(lr_at(o, 5) == doctest::Approx(0.2));
  CHECK(lr_at(o, 10) == doctest::Approx(0.4));
  CHECK(lr_at(o, 55) == doctest::Approx(0.04 + 0.36 * 0.5));
  CHECK(lr_decay_from_name("cosine") == LrDecay::Cosine);
  CHECK_THROWS_AS(lr_decay_from_name("linear"), Error);
}

TEST_CASE("SGD's CPU loop gives, bit for bit, its per-element expression evaluated one element at a time") {
  // optim/cpu/sgd.cpp's loops are vectorised (one branch-free variant per momentum / first step /
  // Nesterov): vector multiply, add and subtract round as the scalar ones do, so a plain scalar loop
  // of the same expression must give the same bits. 1,003 f32 elements: vector body and remainder.
  constexpr int64_t n = 1003;
  for (const auto& [momentum, nesterov] : {std::pair{0.0, false}, {0.9, false}, {0.9, true}}) {
    CAPTURE(momentum);
    CAPTURE(nesterov);
    SGDOptions opt;
    opt.lr = 0.05, opt.momentum = momentum, opt.nesterov = nesterov, opt.weight_decay = 1e-3, opt.dampening = 0.0;
    std::vector<float> w(n), buf(n, 0.0f);
    std::vector<double> w0(n);
    for (int64_t i = 0; i < n; ++i) w0[i] = 0.3 * std::sin(0.7 * double(i)), w[i] = float(w0[i]);
    Tensor p = Tensor::from_vector_f64(w0, {n}, DType::F32);
    p.set_requires_grad(true);
    SGD sgd({{"w", p}}, opt);
    const auto lr = float(opt.lr), wd = float(opt.weight_decay), mom = float(momentum), damp = float(1.0 - opt.dampening);
    for (int t = 1; t <= 3; ++t) {
      std::vector<double> g(n);
      for (int64_t i = 0; i < n; ++i) g[i] = std::cos(1.3 * double(i) + t) * 1e-1;
      p.set_grad(Tensor::from_vector_f64(g, {n}, DType::F32));
      sgd.step();
      for (int64_t i = 0; i < n; ++i) {
        float d = float(g[i]) + wd * w[i];
        if (momentum != 0) {
          const float b = t == 1 ? d : mom * buf[i] + damp * d;
          buf[i] = b;
          d = nesterov ? d + mom * b : b;
        }
        w[i] -= lr * d;
      }
      const std::vector<float> got = p.to_vector();
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &w[i], sizeof(float)) != 0;
      INFO("step ", t);
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("CPU SGD: a large tensor's update has the same bits on 1 and 2 threads") {
  // 300,000 values: above core/ops/common/cpu/parallel.h's threshold, and not a multiple of the
  // 16-element blocks, so the threads' blocks are uneven. Three steps each (the first and the
  // momentum ones), plain and Nesterov.
  const CpuThreads before = configured_cpu_threads();
  const int64_t n = 300000;
  std::vector<double> p0(n), g0(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = std::sin(0.37 * i), g0[i] = std::cos(0.11 * i) * 1e-2;
  for (bool nesterov : {false, true}) {
    SGDOptions opt{0.05, 0.9, 0.0, 1e-4, nesterov};
    std::vector<float> out[2];
    for (int t : {1, 2}) {
      set_cpu_threads(CpuThreads{t, 2, "test"});
      Tensor p = Tensor::from_vector_f64(p0, {n}, DType::F32), g = Tensor::from_vector_f64(g0, {n}, DType::F32);
      p.set_requires_grad(true);
      SGD sgd({{"w", p}}, opt);
      for (int step = 0; step < 3; ++step) {
        p.set_grad(g);
        sgd.step();
      }
      out[t - 1] = p.to_vector();
    }
    CHECK(std::memcmp(out[0].data(), out[1].data(), n * sizeof(float)) == 0);
    CHECK(out[0] != std::vector<float>(p0.begin(), p0.end()));  // it moved
  }
  set_cpu_threads(before.threads > 0 ? before : CpuThreads{1, 1, "test"});
}
