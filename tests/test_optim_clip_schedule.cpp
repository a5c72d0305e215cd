// tests/test_optim_clip_schedule.cpp: gradient-norm clipping (torch.nn.utils.clip_grad_norm_'s
// semantics) and the polynomial LR decay, against closed-form values; the factory's SGD.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "optim/clip.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

using namespace tandem;
using namespace tandem::optim;

TEST_CASE("clip_grad_norm returns the global L2 norm and scales by max_norm / (norm + 1e-6) when above") {
  // ||(3, 4)||^2 + ||(12)||^2 = 169: the global norm is 13, not the mean or max of 5 and 12.
  auto grads = [] {
    return std::vector<Tensor>{Tensor::from_vector({3, 4}, {2}), Tensor(), Tensor::from_vector_f64({12}, {1})};
  };
  auto g = grads();
  CHECK(grad_norm(g) == doctest::Approx(13.0).epsilon(1e-12));
  CHECK(clip_grad_norm(g, 6.5) == doctest::Approx(13.0).epsilon(1e-12));
  const double scale = 6.5 / (13.0 + 1e-6);
  CHECK(g[0].to_vector()[0] == doctest::Approx(3 * scale).epsilon(1e-6));
  CHECK(g[0].to_vector()[1] == doctest::Approx(4 * scale).epsilon(1e-6));
  CHECK(g[2].item() == doctest::Approx(12 * scale).epsilon(1e-12));
  CHECK(grad_norm(g) == doctest::Approx(6.5).epsilon(1e-6));

  g = grads();
  CHECK(clip_grad_norm(g, 13.0) == doctest::Approx(13.0));  // scale = 13/(13 + 1e-6) < 1: still applied
  CHECK(g[2].item() < 12.0);
  g = grads();
  CHECK(clip_grad_norm(g, 20.0) == doctest::Approx(13.0));  // below max_norm: untouched
  CHECK(g[0].to_vector() == std::vector<float>{3, 4});
  CHECK(g[2].item() == 12.0);
  CHECK_THROWS_AS(clip_grad_norm(g, 0.0), Error);
}

TEST_CASE("grad_norm of many gradients of every length mod 8 equals a plain f64 sum, f32 and f64") {
  // The CPU sums in eight interleaved partial sums (optim/clip.cpp); lengths 1..17 and 100003 reach
  // every tail, and each element must count once: a dropped or doubled element misses by >= 1e-6.
  for (DType dt : {DType::F32, DType::F64}) {
    std::vector<Tensor> grads;
    double want = 0;
    uint32_t s = 5;
    for (int64_t len : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 100003}) {
      std::vector<double> v(static_cast<size_t>(len));
      for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = 0.5 + static_cast<double>(s >> 8) / static_cast<double>(1u << 24);  // [0.5, 1.5): no element is tiny
        if (dt == DType::F32) x = static_cast<float>(x);
        want += x * x;
      }
      grads.push_back(Tensor::from_vector_f64(v, {len}, dt));
    }
    CAPTURE(dtype_name(dt));
    CHECK(grad_norm(grads) == doctest::Approx(std::sqrt(want)).epsilon(1e-13));
  }
}

TEST_CASE("clip_grad_norm under ZeRO: the hook sums the squares of every shard") {
  // Two "ranks" hold (3, 4) and (12); each adds the other's 144 or 25 through the hook.
  std::vector<Tensor> rank0{Tensor::from_vector({3, 4}, {2})};
  const double n = clip_grad_norm(rank0, 6.5, [](std::vector<double>& v) {
    REQUIRE(v.size() == 1);
    CHECK(v[0] == doctest::Approx(25.0));
    v[0] += 144.0;
  });
  CHECK(n == doctest::Approx(13.0));
  CHECK(rank0[0].to_vector()[1] == doctest::Approx(4 * 6.5 / 13.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm over an optimizer's gradients, then its step") {
  Tensor w = Tensor::from_vector({1.0f, 1.0f}, {2});
  w.set_requires_grad(true);
  SGD sgd({{"w", w}}, {1.0});
  w.set_grad(Tensor::from_vector({30.0f, 40.0f}, {2}));
  CHECK(clip_grad_norm(sgd, 5.0) == doctest::Approx(50.0));
  sgd.step();  // the step uses the clipped gradient (3, 4) * 50 / (50 + 1e-6)
  CHECK(w.to_vector()[0] == doctest::Approx(1.0 - 3.0).epsilon(1e-6));
  CHECK(w.to_vector()[1] == doctest::Approx(1.0 - 4.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm leaves gradients alone when the norm is not finite") {
  std::vector<Tensor> g{Tensor::from_vector({INFINITY, 1.0f}, {2})};
  CHECK(std::isinf(clip_grad_norm(g, 1.0)));
  CHECK(g[0].to_vector()[1] == 1.0f);
}

TEST_CASE("GradClipper (the capturable clip) equals clip_grad_norm bit for bit, and keeps the norm in a tensor") {
  // Cases: far above max_norm, just above (scale within an ulp of 1), below, exactly zero, non-finite,
  // f32 and f64 gradients mixed, undefined entries; each run with and without a reduce hook that
  // adds another "rank's" squares (the host hook and the device hook add the same value).
  struct Case {
    std::vector<std::vector<double>> values;
    double max_norm;
  };
  const std::vector<Case> cases{{{{3, 4}, {12}}, 6.5},
                                {{{0.1, -0.7, 1e-3}, {2.5, 0.25}}, 2.6},
                                {{{3, 4}, {12}}, 13.0},
                                {{{3, 4}, {12}}, 20.0},
                                {{{0, 0}, {0}}, 1.0},
                                {{{INFINITY, 1}, {2}}, 1.0},
                                {{{NAN, 1}, {2}}, 1.0}};
  for (size_t c = 0; c < cases.size(); ++c) {
    for (bool hook : {false, true}) {
      CAPTURE(c);
      CAPTURE(hook);
      auto grads = [&] {
        const auto& v = cases[c].values;
        return std::vector<Tensor>{Tensor::from_vector(std::vector<float>(v[0].begin(), v[0].end()),
                                                       {static_cast<int64_t>(v[0].size())}),
                                   Tensor(), Tensor::from_vector_f64(v[1], {static_cast<int64_t>(v[1].size())})};
      };
      std::vector<Tensor> host = grads(), dev = grads();
      const double other_rank = 0.3;
      SumSquaresReduce host_hook;
      DeviceSumReduce dev_hook;
      if (hook) {
        host_hook = [&](std::vector<double>& v) { v[0] += other_rank; };
        dev_hook = [&](Tensor& t) {
          CHECK(t.dtype() == DType::F64);  // the CPU's accumulation type
          *t.data<double>() += other_rank;
        };
      }
      const double norm = clip_grad_norm(host, cases[c].max_norm, host_hook);
      GradClipper clipper(cases[c].max_norm, dev_hook);
      CHECK_FALSE(clipper.norm().defined());
      clipper.clip(dev);
      CHECK(clipper.norm().dtype() == DType::F32);
      const double got = clipper.norm().item();
      CHECK(((std::isnan(norm) && std::isnan(got)) || got == static_cast<float>(norm)));
      for (size_t i : {size_t{0}, size_t{2}}) {  // bytes: NaN entries compare unequal as values
        const auto a = dev[i].to_vector_f64(), b = host[i].to_vector_f64();
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
      }
    }
  }
  CHECK_THROWS_AS(GradClipper(0.0), Error);
}

TEST_CASE("LR polynomial decay after linear warmup (BERT's schedule)") {
  LrScheduleOptions o;
  o.base_lr = 0.4;
  o.decay = lr_decay_from_name("poly");
  o.warmup_steps = 10;
  o.total_steps = 110;
  o.min_lr = 0.04;
  CHECK(lr_at(o, 0) == doctest::Approx(0.0));
  CHECK(lr_at(o, 5) == doctest::Approx(0.2));
  CHECK(lr_at(o, 10) == doctest::Approx(0.4));
  CHECK(lr_at(o, 35) == doctest::Approx(0.04 + 0.36 * 0.75));  // power 1: linear, p = 1/4
  CHECK(lr_at(o, 60) == doctest::Approx(0.04 + 0.36 * 0.5));
  CHECK(lr_at(o, 110) == doctest::Approx(0.04));
  CHECK(lr_at(o, 500) == doctest::Approx(0.04));  // after total_steps: the floor (HF: lr_end)
  o.power = 2.0;
  CHECK(lr_at(o, 60) == doctest::Approx(0.04 + 0.36 * 0.25));
  CHECK(lr_at(o, 85) == doctest::Approx(0.04 + 0.36 * 0.0625));
  o.power = 0.5;
  CHECK(lr_at(o, 35) == doctest::Approx(0.04 + 0.36 * std::sqrt(0.75)));
  o.total_steps = 10;
  CHECK_THROWS_AS(lr_at(o, 20), Error);
  CHECK_THROWS_AS(lr_decay_from_name("polynomial"), Error);
}

TEST_CASE("lr_at_position: the integer form's values bit for bit at every step, and in between a real position") {
  // The integer form is what uninterrupted runs use: a resume at the same global batch must give the
  // same bits at the same step, for every kind of schedule.
  std::vector<LrScheduleOptions> schedules(4);
  schedules[0].decay = LrDecay::Cosine, schedules[0].warmup_steps = 7, schedules[0].warmup_start_factor = 0.125;
  schedules[1].decay = LrDecay::Poly, schedules[1].warmup_steps = 0, schedules[1].power = 2, schedules[1].min_lr = 1e-4;
  schedules[2].decay = LrDecay::Step, schedules[2].milestones = {30, 60, 80}, schedules[2].warmup_steps = 5;
  schedules[3].decay = LrDecay::Constant, schedules[3].warmup_steps = 3;
  for (LrScheduleOptions& o : schedules) {
    o.base_lr = 0.3;
    o.total_steps = 1104;
    for (int64_t n = 0; n <= 1200; ++n) {
      const double a = lr_at(o, n), b = lr_at_position(o, static_cast<double>(n));
      REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
    }
  }
  // Between two steps: warmup and decay are the formulas at the real position; the step schedule
  // changes at a milestone and nowhere else; positions never go back.
  const LrScheduleOptions& cos = schedules[0];
  CHECK(lr_at_position(cos, 3.5) == doctest::Approx(0.3 * (0.125 + 0.875 * 3.5 / 7)));
  const double p = (500.25 - 7) / (1104 - 7);
  CHECK(lr_at_position(cos, 500.25) == doctest::Approx(0.3 * 0.5 * (1 + std::cos(M_PI * p))));
  CHECK(lr_at_position(cos, 500.25) < lr_at(cos, 500));
  CHECK(lr_at_position(cos, 500.25) > lr_at(cos, 501));
  CHECK(lr_at_position(schedules[2], 29.99) == doctest::Approx(0.3));
  CHECK(lr_at_position(schedules[2], 30.0) == doctest::Approx(0.03));
  CHECK_THROWS_AS(lr_at_position(cos, -0.5), Error);
  CHECK_THROWS_AS(lr_at_position(cos, std::nan("")), Error);
}

TEST_CASE("make_optimizer(\"sgd\") is SGD with the same options") {
  auto run = [](bool factory) {
    Tensor p = Tensor::from_vector({0.5f, -1.0f}, {2});
    p.set_requires_grad(true);
    std::unique_ptr<Optimizer> opt;
    if (factory) {
      OptimizerOptions o;
      o.lr = 0.1, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 1e-2;
      opt = make_optimizer("sgd", {{"p", p}}, o);
    } else {
      opt = std::make_unique<SGD>(NamedTensors{{"p", p}}, SGDOptions{0.1, 0.9, 0.0, 1e-2, true});
    }
    for (int t = 0; t < 3; ++t) {
      p.set_grad(Tensor::from_vector({std::sin(float(t)), std::cos(float(t))}, {2}));
      opt->step();
    }
    CHECK(opt->state().size() == 1);
    CHECK(opt->state()[0].first == "p.momentum_buffer");
    return p.to_vector();
  };
  CHECK(run(true) == run(false));
}
