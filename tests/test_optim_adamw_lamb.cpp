// tests/test_optim_adamw_lamb.cpp: AdamW and LAMB against independent f64 references, segments
// (ZeRO's shards) against whole parameters, and state round trips.
//
// The oracle: the f64 loops below, written from torch.optim.AdamW's documented algorithm
// (amsgrad = False) and from the LAMB paper as apex FusedLAMB implements it (see optim/lamb.h),
// on a fixed gradient sequence g_t[i] = sin(i + t + k/2) * (1 + 0.3 k) for parameter k.
// apps/scripts/optim_reference.py recomputes the same problem with torch.optim.AdamW (and a torch
// LAMB) where torch is installed and checks it against the same formulas.
#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>

#include "optim/adamw.h"
#include "optim/lamb.h"

using namespace tandem;
using namespace tandem::optim;

namespace {

// Three parameters: a weight (cut by the sharded tests), a zero-initialised bias (||w|| = 0 at the
// first LAMB step, so its trust ratio is 1), and a small head.
const std::vector<std::string> kNames{"layer.weight", "layer.bias", "head.weight"};
const std::vector<Shape> kShapes{{3, 4}, {5}, {7}};
constexpr int kSteps = 6;

std::vector<double> initial(size_t k) {
  std::vector<double> w(static_cast<size_t>(shape_numel(kShapes[k])));
  for (size_t i = 0; i < w.size(); ++i) w[i] = k == 0 ? 0.5 * std::cos(double(i)) : k == 1 ? 0.0 : 0.1 * (double(i) - 3);
  return w;
}
double grad_at(size_t k, size_t i, int t) { return std::sin(double(i) + t + 0.5 * double(k)) * (1.0 + 0.3 * double(k)); }

struct Hyper {
  double lr, beta1, beta2, eps, wd;
};
const Hyper kAdamW{1e-2, 0.9, 0.999, 1e-8, 0.1};
const Hyper kLamb{1e-2, 0.9, 0.999, 1e-6, 0.1};

OptimizerOptions options(const Hyper& h) {
  OptimizerOptions o;
  o.lr = h.lr, o.beta1 = h.beta1, o.beta2 = h.beta2, o.eps = h.eps, o.weight_decay = h.wd;
  return o;
}

// The references: every parameter gets a gradient at every step except `skip` at step `skip_t`
// (which keeps its own step count, as PyTorch's per-parameter state["step"]).
std::vector<std::vector<double>> reference(bool lamb, const Hyper& h, size_t skip = 99, int skip_t = 0) {
  std::vector<std::vector<double>> w, m, v;
  std::vector<int> steps(kNames.size(), 0);
  for (size_t k = 0; k < kNames.size(); ++k) {
    w.push_back(initial(k));
    m.emplace_back(w[k].size(), 0.0);
    v.emplace_back(w[k].size(), 0.0);
  }
  for (int t = 1; t <= kSteps; ++t) {
    for (size_t k = 0; k < kNames.size(); ++k) {
      if (k == skip && t == skip_t) continue;
      const int s = ++steps[k];
      const double bc1 = 1 - std::pow(h.beta1, s), bc2 = 1 - std::pow(h.beta2, s);
      std::vector<double> u(w[k].size());
      double wn = 0, un = 0;
      for (size_t i = 0; i < w[k].size(); ++i) {
        const double g = grad_at(k, i, t);
        m[k][i] = h.beta1 * m[k][i] + (1 - h.beta1) * g;
        v[k][i] = h.beta2 * v[k][i] + (1 - h.beta2) * g * g;
        const double m_hat = m[k][i] / bc1, v_hat = v[k][i] / bc2;
        if (lamb) {
          u[i] = m_hat / (std::sqrt(v_hat) + h.eps) + h.wd * w[k][i];
          wn += w[k][i] * w[k][i];
          un += u[i] * u[i];
        } else {
          w[k][i] *= 1 - h.lr * h.wd;  // decoupled decay first, as PyTorch
          w[k][i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
        }
      }
      if (!lamb) continue;
      const double trust = wn > 0 && un > 0 ? std::sqrt(wn) / std::sqrt(un) : 1.0;
      for (size_t i = 0; i < w[k].size(); ++i) w[k][i] -= h.lr * trust * u[i];
    }
  }
  return w;
}

NamedTensors make_params(DType dtype) {
  NamedTensors out;
  for (size_t k = 0; k < kNames.size(); ++k) {
    Tensor p = Tensor::from_vector_f64(initial(k), kShapes[k], dtype);
    p.set_requires_grad(true);
    out.emplace_back(kNames[k], p);
  }
  return out;
}

Tensor grad_tensor(size_t k, int t, DType dtype) {
  std::vector<double> g(static_cast<size_t>(shape_numel(kShapes[k])));
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(k, i, t);
  return Tensor::from_vector_f64(g, kShapes[k], dtype);
}

// Runs kSteps of `name` on whole parameters, with an optional skipped gradient; returns the values.
std::vector<std::vector<double>> run_whole(const std::string& name, const Hyper& h, DType dtype, size_t skip = 99,
                                           int skip_t = 0) {
  NamedTensors params = make_params(dtype);
  auto opt = make_optimizer(name, params, options(h));
  for (int t = 1; t <= kSteps; ++t) {
    for (size_t k = 0; k < params.size(); ++k)
      params[k].second.set_grad(k == skip && t == skip_t ? Tensor() : grad_tensor(k, t, dtype));
    opt->step();
  }
  std::vector<std::vector<double>> out;
  for (auto& [_, p] : params) out.push_back(p.to_vector_f64());
  return out;
}

void check_close(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                 double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    REQUIRE(got[k].size() == want[k].size());
    for (size_t i = 0; i < got[k].size(); ++i) {
      INFO(kNames[k], "[", i, "]: got ", got[k][i], " want ", want[k][i]);
      CHECK(std::fabs(got[k][i] - want[k][i]) <= atol + rtol * std::fabs(want[k][i]));
    }
  }
}

}  // namespace

TEST_CASE("AdamW matches the f64 reference of torch.optim.AdamW's algorithm") {
  const auto want = reference(false, kAdamW);
  // f64: the same formula in another order of operations; agreement to ~1e-15.
  check_close(run_whole("adamw", kAdamW, DType::F64), want, 1e-6, 1e-12);
  // f32: each of the 6 steps rounds w, m and v once (2^-24 relative): well inside 1e-6 of w.
  check_close(run_whole("adamw", kAdamW, DType::F32), want, 1e-6, 1e-7);
  SUBCASE("a parameter without a gradient keeps its own step count") {
    check_close(run_whole("adamw", kAdamW, DType::F64, 1, 3), reference(false, kAdamW, 1, 3), 1e-6, 1e-12);
  }
  SUBCASE("the comparison is sensitive: no weight decay gives other values") {
    Hyper h = kAdamW;
    h.wd = 0;
    const auto got = run_whole("adamw", h, DType::F64);
    CHECK(std::fabs(got[0][1] - want[0][1]) > 1e-5);
  }
}

TEST_CASE("LAMB matches the f64 reference LAMB (You et al. 2019, apex FusedLAMB)") {
  const auto want = reference(true, kLamb);
  check_close(run_whole("lamb", kLamb, DType::F64), want, 1e-6, 1e-12);
  // f32: w, m, v rounded once per step; the norms are summed in f64.
  check_close(run_whole("lamb", kLamb, DType::F32), want, 1e-6, 1e-7);
  check_close(run_whole("lamb", kLamb, DType::F64, 2, 2), reference(true, kLamb, 2, 2), 1e-6, 1e-12);
}

TEST_CASE("the f64 references agree with apps/scripts/optim_reference.py (a second, Python implementation)") {
  // Values printed by the script's formula runs (17 significant digits).
  const auto adamw = reference(false, kAdamW), lamb = reference(true, kLamb);
  CHECK(adamw[0][0] == doctest::Approx(0.46845513287001173).epsilon(1e-12));
  CHECK(adamw[1][0] == doctest::Approx(-0.020453998012844681).epsilon(1e-12));
  CHECK(adamw[2][6] == doctest::Approx(0.28185747931092775).epsilon(1e-12));
  CHECK(lamb[0][0] == doctest::Approx(0.49063881908592089).epsilon(1e-12));
  CHECK(lamb[1][0] == doctest::Approx(-0.0099929617875938095).epsilon(1e-12));
  CHECK(lamb[2][3] == doctest::Approx(-0.00056143028706789107).epsilon(1e-12));
}

TEST_CASE("defaults are PyTorch's and apex's, and bad options fail clearly") {
  NamedTensors params = make_params(DType::F32);
  auto adamw = make_optimizer("adamw", params, {});
  CHECK(adamw->lr() == 1e-3);
  CHECK(std::string(adamw->name()) == "AdamW");
  CHECK(make_optimizer("lamb", params, {})->lr() == 1e-3);
  CHECK(make_optimizer("sgd", params, {})->lr() == 0.1);
  OptimizerOptions bad;
  bad.beta1 = 1.0;
  CHECK_THROWS_AS(make_optimizer("adamw", params, bad), Error);
  bad = {};
  bad.momentum = 0.9;
  CHECK_THROWS_AS(make_optimizer("lamb", params, bad), Error);  // SGD's knob on an Adam optimizer
  bad = {};
  bad.eps = 1e-8;
  CHECK_THROWS_AS(make_optimizer("sgd", params, bad), Error);
  CHECK_THROWS_AS(make_optimizer("adam", params, {}), Error);
  CHECK_THROWS_AS(adamw->set_lr(-1), Error);
}

namespace {
// A flat parameter space of the three parameters, cut into shards at `cuts` (element offsets into
// the concatenation); returns the segments of shard r, views into `params` and `grads`.
std::vector<ParamSegment> shard(const NamedTensors& params, const std::vector<Tensor>& grads,
                                const std::vector<int64_t>& cuts, size_t r) {
  std::vector<ParamSegment> out;
  int64_t base = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t n = params[k].second.numel();
    const int64_t lo = std::max(cuts[r], base), hi = std::min(cuts[r + 1], base + n);
    if (lo < hi) {
      ParamSegment s;
      s.name = params[k].first;
      s.param = params[k].second.detach().view({-1}).slice(lo - base, hi - base);
      s.grad = grads.empty() ? Tensor() : grads[k].view({-1}).slice(lo - base, hi - base);
      s.offset = lo - base;
      s.param_numel = n;
      s.param_index = static_cast<int64_t>(k);
      out.push_back(s);
    }
    base += n;
  }
  return out;
}

// An all-reduce (sum) between threads, as ZeRO's hook would do between ranks: every rank adds the
// contributions in rank order, so all get the same bits.
struct ThreadAllReduce {
  explicit ThreadAllReduce(size_t n) : sync(static_cast<std::ptrdiff_t>(n)), parts(n) {}
  void operator()(size_t rank, std::vector<double>& v) {
    parts[rank] = v;
    sync.arrive_and_wait();
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = 0;
      for (const auto& p : parts) v[i] += p[i];
    }
    sync.arrive_and_wait();  // nobody overwrites parts before everyone has read them
  }
  std::barrier<> sync;
  std::vector<std::vector<double>> parts;
};

// kSteps of `name` with the parameters split into shards at `cuts`, one optimizer per shard, run
// as threads (in-process "ranks"). Returns the values and the assembled state.
// Hook: 0 none, 1 norm_reduce (host vector), 2 norm_reduce_device (an f64 tensor on the CPU).
std::pair<std::vector<std::vector<double>>, NamedTensors> run_sharded(const std::string& name, const Hyper& h,
                                                                      const std::vector<int64_t>& cuts,
                                                                      int hook) {
  NamedTensors params = make_params(DType::F64);
  const size_t ranks = cuts.size() - 1;
  ThreadAllReduce reduce(ranks);
  std::vector<std::unique_ptr<Optimizer>> opts;
  for (size_t r = 0; r < ranks; ++r) {
    OptimizerOptions o = options(h);
    if (hook == 1) o.norm_reduce = [&reduce, r](std::vector<double>& v) { reduce(r, v); };
    if (hook == 2)
      o.norm_reduce_device = [&reduce, r](Tensor& t) {
        REQUIRE(t.dtype() == DType::F64);
        std::vector<double> v = t.to_vector_f64();
        reduce(r, v);
        t.copy_(Tensor::from_vector_f64(v, t.shape()));
      };
    opts.push_back(make_optimizer(name, shard(params, {}, cuts, r), 3, o));
  }
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<Tensor> grads;
    for (size_t k = 0; k < params.size(); ++k) grads.push_back(grad_tensor(k, t, DType::F64));
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        std::vector<Tensor> g;
        for (auto& s : shard(params, grads, cuts, r)) g.push_back(s.grad);
        opts[r]->set_grads(g);
        opts[r]->step();
      });
    for (auto& th : threads) th.join();
  }
  std::vector<StateSlice> slices;
  for (auto& o : opts)
    for (auto& s : o->state_slices()) slices.push_back(s);
  std::vector<std::vector<double>> values;
  for (auto& [_, p] : params) values.push_back(p.to_vector_f64());
  return {values, assemble_state(slices)};
}

void check_same_state(const NamedTensors& got, const NamedTensors& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [key, w] : want) {
    const Tensor* g = nullptr;
    for (const auto& [k2, t] : got)
      if (k2 == key) g = &t;
    REQUIRE_MESSAGE(g != nullptr, key);
    CHECK(g->numel() == w.numel());
    const auto a = g->to_vector_f64(), b = w.to_vector_f64();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
  }
}
}  // namespace

TEST_CASE("a parameter optimized as segments equals the whole parameter (AdamW and LAMB)") {
  for (const std::string name : {"adamw", "lamb"}) {
    CAPTURE(name);
    const Hyper& h = name == "lamb" ? kLamb : kAdamW;
    // One optimizer holding every parameter as two or three segments: elementwise AdamW is exact;
    // LAMB adds its per-segment norm sums in another order (f64), so it agrees to rounding.
    NamedTensors seg_params = make_params(DType::F64);
    const std::vector<int64_t> cuts{0, 5, 15, 24};
    std::vector<ParamSegment> segs;
    for (size_t r = 0; r + 1 < cuts.size(); ++r)
      for (auto& sg : shard(seg_params, {}, cuts, r)) segs.push_back(sg);
    auto segmented = make_optimizer(name, segs, 3, options(h));
    for (int t = 1; t <= kSteps; ++t) {
      std::vector<Tensor> grads, g;
      for (size_t k = 0; k < seg_params.size(); ++k) grads.push_back(grad_tensor(k, t, DType::F64));
      for (size_t r = 0; r + 1 < cuts.size(); ++r)
        for (auto& sg : shard(seg_params, grads, cuts, r)) g.push_back(sg.grad);
      segmented->set_grads(g);
      segmented->step();
    }
    std::vector<std::vector<double>> got;
    for (auto& [_, p] : seg_params) got.push_back(p.to_vector_f64());
    NamedTensors params = make_params(DType::F64);
    auto whole = make_optimizer(name, params, options(h));
    for (int t = 1; t <= kSteps; ++t) {
      for (size_t k = 0; k < params.size(); ++k) params[k].second.set_grad(grad_tensor(k, t, DType::F64));
      whole->step();
    }
    std::vector<std::vector<double>> want;
    for (auto& [_, p] : params) want.push_back(p.to_vector_f64());
    if (name == "adamw") {
      CHECK(got == want);
    } else {
      check_close(got, want, 1e-12, 1e-15);
    }
  }
}

TEST_CASE("sharded LAMB with the norm all-reduce hook equals unsharded LAMB; without it, it does not") {
  const auto want = run_whole("lamb", kLamb, DType::F64);
  // Two ranks; the cut at 8 falls inside layer.weight (12 elements), so its norms need both ranks.
  const auto [got, state] = run_sharded("lamb", kLamb, {0, 8, 24}, 1);
  check_close(got, want, 1e-12, 1e-15);
  const auto [alone, _] = run_sharded("lamb", kLamb, {0, 8, 24}, 0);
  CHECK(std::fabs(alone[0][0] - want[0][0]) > 1e-6);  // each rank's own partial norms: another step
  // The captured step's hook (a tensor reduced in place) takes exactly the host hook's step.
  const auto [device_hook, device_state] = run_sharded("lamb", kLamb, {0, 8, 24}, 2);
  CHECK(device_hook == got);
}

TEST_CASE("sharded state assembles into the unsharded checkpoint and resumes on another world size") {
  for (const std::string name : {"adamw", "lamb"}) {
    CAPTURE(name);
    const Hyper& h = name == "lamb" ? kLamb : kAdamW;
    NamedTensors params = make_params(DType::F64);
    auto whole = make_optimizer(name, params, options(h));
    for (int t = 1; t <= kSteps; ++t) {
      for (size_t k = 0; k < params.size(); ++k) params[k].second.set_grad(grad_tensor(k, t, DType::F64));
      whole->step();
    }
    const auto [_, assembled] = run_sharded(name, h, {0, 8, 24}, 1);
    check_same_state(assembled, whole->state());
    // Keys follow PyTorch's state dict with the parameter name as prefix, shapes the parameters'.
    const NamedTensors st = whole->state();
    REQUIRE(st.size() == 9);
    CHECK(st[0].first == "layer.weight.step");
    CHECK(st[0].second.item() == kSteps);
    CHECK(st[1].first == "layer.weight.exp_avg");
    CHECK(st[1].second.shape() == Shape{3, 4});
    CHECK(st[2].first == "layer.weight.exp_avg_sq");
    // Load the unsharded state into three shards cut elsewhere: each takes its own range.
    NamedTensors p3 = make_params(DType::F64);
    for (size_t k = 0; k < p3.size(); ++k) p3[k].second.detach().copy_(params[k].second.detach());
    std::vector<std::unique_ptr<Optimizer>> shards;
    for (size_t r = 0; r < 3; ++r) {
      shards.push_back(make_optimizer(name, shard(p3, {}, {0, 3, 14, 24}, r), 3, options(h)));
      shards.back()->load_state(st);
    }
    CHECK_THROWS_AS(shards[0]->state(), Error);  // a partial parameter: state_slices() only
    std::vector<StateSlice> slices;
    for (auto& s : shards)
      for (auto& sl : s->state_slices()) slices.push_back(sl);
    check_same_state(assemble_state(slices), st);
  }
}

TEST_CASE("AdamW and LAMB state round trip: resume in a fresh optimizer equals uninterrupted") {
  for (const std::string name : {"adamw", "lamb"}) {
    CAPTURE(name);
    auto run = [&](bool resume) {
      NamedTensors params = make_params(DType::F32);
      auto opt = make_optimizer(name, params, options(kAdamW));
      for (int t = 1; t <= kSteps; ++t) {
        if (resume && t == 4) {
          NamedTensors copy;
          for (auto& [n, s] : opt->state()) copy.emplace_back(n, s.clone());
          opt = make_optimizer(name, params, options(kAdamW));
          opt->load_state(copy);
        }
        for (size_t k = 0; k < params.size(); ++k) params[k].second.set_grad(grad_tensor(k, t, DType::F32));
        opt->step();
      }
      std::vector<std::vector<float>> out;
      for (auto& [_, p] : params) out.push_back(p.to_vector());
      return out;
    };
    CHECK(run(true) == run(false));  // bit-identical: same arithmetic in the same order
  }
}

TEST_CASE("load_state rejects partial or foreign state") {
  NamedTensors params = make_params(DType::F32);
  AdamW opt(params, options(kAdamW));
  CHECK_THROWS_AS(opt.load_state({{"layer.bias.exp_avg", Tensor::zeros({5})}}), Error);  // no step, no exp_avg_sq
  CHECK_THROWS_AS(opt.load_state({{"nope.step", Tensor::ones({})}}), Error);
  CHECK_THROWS_AS(opt.load_state({{"layer.bias.momentum_buffer", Tensor::zeros({5})}}), Error);
  CHECK_THROWS_AS(opt.load_state({{"layer.bias.step", Tensor::ones({})},
                                  {"layer.bias.exp_avg", Tensor::zeros({4})},
                                  {"layer.bias.exp_avg_sq", Tensor::zeros({5})}}),
                  Error);
}

TEST_CASE("AdamW's CPU loop gives, bit for bit, its per-element expression evaluated one element at a time") {
  // optim/adamw.cpp's loop is vectorised (restrict pointers, -fno-math-errno): vector sqrt and
  // division round as the scalar ones do, so a plain scalar loop of the same expression must give
  // the same bits. 1,003 elements: the vector body and its remainder both run.
  constexpr int64_t n = 1003;
  std::vector<double> w0(n), g(n);
  for (int64_t i = 0; i < n; ++i) w0[i] = 0.3 * std::sin(0.7 * double(i)), g[i] = std::cos(1.3 * double(i)) * 1e-2;
  Tensor p = Tensor::from_vector_f64(w0, {n}, DType::F32);
  p.set_requires_grad(true);
  NamedTensors params{{"w", p}};
  auto opt = make_optimizer("adamw", params, options(kAdamW));
  std::vector<float> w(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(w0[i]);
  const Hyper& h = kAdamW;
  for (int t = 1; t <= 3; ++t) {
    p.set_grad(Tensor::from_vector_f64(g, {n}, DType::F32));
    opt->step();
    const auto beta1 = float(h.beta1), beta2 = float(h.beta2), keep1 = float(1.0 - h.beta1),
               keep2 = float(1.0 - h.beta2), e = float(h.eps), decay = float(1.0 - h.lr * h.wd);
    const auto step_size = float(h.lr / (1.0 - std::pow(h.beta1, double(t))));
    const auto bc2_sqrt = float(std::sqrt(1.0 - std::pow(h.beta2, double(t))));
    for (int64_t i = 0; i < n; ++i) {
      const auto gi = static_cast<float>(g[i]);
      const float pv = w[i] * decay, mv = beta1 * m[i] + keep1 * gi, vv = beta2 * v[i] + keep2 * gi * gi;
      m[i] = mv, v[i] = vv;
      w[i] = pv - step_size * (mv / (std::sqrt(vv) / bc2_sqrt + e));
    }
    const std::vector<float> got = p.to_vector();
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &w[i], sizeof(float)) != 0;
    INFO("step ", t);
    CHECK(differ == 0);
  }
}
