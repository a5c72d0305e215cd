// tests/test_ema.cpp: the EMA of the weights (apps/trainer/step/ema.h) against its closed form, its
// checkpoint entries and a resume, and its refusals.
//
// A tiny model's parameters are set to known values p_1..p_k before each update; the average must
// then be e_k = d^k e_0 + (1 - d) sum_t d^(k-t) p_t, computed here in f64. The EMA runs in f32 with
// d and 1 - d rounded to f32 (ema.h: one axpby per tensor): each update adds ~1 f32 ulp of rounding,
// so after 20 updates 1e-5 relative is a wide margin that still catches a wrong decay (0.9 vs 0.99
// differ by ~10 % here) or a skipped term.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "apps/trainer/step/ema.h"
#include "core/autograd.h"
#include "layers/layers.h"
#include "checkpoint/state_dict.h"

using namespace tandem;

namespace {

std::shared_ptr<Sequential> tiny() {
  Generator g(7);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(3, 2, 3, Conv2dOptions{.padding = 1, .bias = false}, &g), std::make_shared<BatchNorm2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(2 * 4 * 4, 3, true, &g)});
}

// Sets every parameter element i of parameter j to f(step, j, i).
double value(int step, size_t j, int64_t i) { return std::sin(0.3 * step + 1.7 * double(j) + 0.11 * double(i)); }
void set_params(Module& m, int step) {
  autograd::NoGradGuard ng;
  size_t j = 0;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    for (int64_t i = 0; i < p.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(value(step, j, i));
    Tensor src = Tensor::from_vector(v, p.shape());
    Tensor dst = p.detach();
    dst.copy_(src);
    ++j;
  }
}

// The EMA as the checkpoint carries it, each tensor in the model's layout again.
std::map<std::string, std::vector<float>> averages(const trainer::ModelEma& ema, Module& m) {
  std::map<std::string, std::vector<float>> out;
  const auto convs = conv_weight_names(m);
  for (const auto& [n, t] : ema.state()) {
    const std::string param = n.substr(4);
    const bool conv = std::find(convs.begin(), convs.end(), param) != convs.end();
    out[param] = (conv ? oihw_to_ohwi(t) : t).to_vector();
  }
  return out;
}

}  // namespace

TEST_CASE("ModelEma after k updates equals the closed form; its state resumes bit for bit") {
  auto m = tiny();
  const double d = 0.9;
  set_params(*m, 0);
  trainer::ModelEma ema(*m, d);
  const int k = 20;
  for (int s = 1; s <= k; ++s) {
    set_params(*m, s);
    ema.update();
  }
  const auto got = averages(ema, *m);
  const auto params = m->named_parameters();
  REQUIRE(got.size() == params.size());
  double worst = 0;
  for (size_t j = 0; j < params.size(); ++j) {
    const auto& [name, p] = params[j];
    const std::vector<float>& e = got.at(name);
    // The element order of the model's layout: set_params wrote p's own order.
    for (int64_t i = 0; i < p.numel(); ++i) {
      double want = std::pow(d, k) * value(0, j, i);
      for (int t = 1; t <= k; ++t) want += (1 - d) * std::pow(d, k - t) * value(t, j, i);
      worst = std::max(worst, std::abs(e[static_cast<size_t>(i)] - want));
    }
  }
  MESSAGE("largest |EMA - closed form| after ", k, " updates: ", worst);
  CHECK(worst < 1e-5);
  CHECK(worst > 0);  // a sanity check that something was compared

  // The checkpoint's entries: "ema.<param>", conv weights OIHW (PyTorch's layout).
  const NamedTensors s = ema.state();
  CHECK(s.front().first == "ema.0.weight");
  CHECK(s.front().second.shape() == Shape{2, 3, 3, 3});

  // take_state separates them from the optimizer's; a new EMA restored from them continues exactly.
  NamedTensors entries = {{"momentum.3.weight", Tensor::zeros({3, 32})}};
  for (const auto& e : s) entries.push_back({e.first, e.second.clone()});
  const NamedTensors taken = trainer::ModelEma::take_state(entries);
  CHECK(entries.size() == 1);
  CHECK(taken.size() == s.size());
  trainer::ModelEma resumed(*m, d);
  resumed.load_state(taken, "test");
  for (int step = k + 1; step <= k + 3; ++step) {
    set_params(*m, step);
    ema.update();
    resumed.update();
  }
  const auto a = averages(ema, *m), b = averages(resumed, *m);
  for (const auto& [n, v] : a) CHECK_MESSAGE(v == b.at(n), n);

  // Applied: the model holds the average for a pass, its own weights after.
  const std::vector<float> own = m->named_parameters().back().second.to_vector();
  {
    const trainer::ModelEma::Applied on(ema);
    CHECK(m->named_parameters().back().second.to_vector() == a.at("3.bias"));
  }
  CHECK(m->named_parameters().back().second.to_vector() == own);

  // A file whose EMA lacks a parameter is named.
  NamedTensors short_of_one(taken.begin(), taken.end() - 1);
  CHECK_THROWS_WITH_AS(resumed.load_state(short_of_one, "checkpoint 'x'"), doctest::Contains("none of 3.bias"), Error);
}

TEST_CASE("ema_refusal: ZeRO-3 and the parameter server, in the library's words") {
  trainer::StepOptions o;
  CHECK(!trainer::ema_refusal(o));
  o.strategy = trainer::Strategy::Zero2;
  CHECK(!trainer::ema_refusal(o));
  o.strategy = trainer::Strategy::Zero3;
  REQUIRE(trainer::ema_refusal(o));
  o.strategy = trainer::Strategy::ParameterServer;
  REQUIRE(trainer::ema_refusal(o));
}
