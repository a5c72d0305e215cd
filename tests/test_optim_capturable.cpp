// tests/test_optim_capturable.cpp: the capturable optimizers on the CPU - update counts in tensors,
// the device-side skip (step(found_inf)), and capturable().
//
// The oracle for "nothing changed": the CPU loops as they were before the update counts moved into
// tensors (optim/cpu/sgd.cpp, optim/adamw.cpp and optim/lamb.cpp at e25430b), written out again
// below with the same types and the same order of operations, and counts kept as host integers.
// Agreement is asserted bit for bit (memcmp of the values), parameters and state alike. The same
// comparison against the binaries of e25430b was also run once by hand (a fingerprint of 24 runs:
// identical; see the branch's report).
// The skip: a run whose flagged steps carry inf gradients must end bit-identical to a run that
// never saw those steps - parameters, moments, momentum buffers and step counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/random.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/sgd.h"

using namespace tandem;
using namespace tandem::optim;

namespace {

const std::vector<int64_t> kSizes{5, 64, 3, 17};
constexpr int kSteps = 7;

// ---- the reference loops (see the file comment) ----
template <typename T>
struct RefState {
  std::vector<std::vector<T>> w, m, v;  // m: SGD's momentum buffer too
  std::vector<int64_t> step;            // AdamW/LAMB: per parameter; SGD: whether m holds history
};

template <typename T>
void ref_sgd(RefState<T>& s, size_t k, const std::vector<T>& g, const OptimizerOptions& o, double lr) {
  const T lr_t = static_cast<T>(lr), wd = static_cast<T>(o.weight_decay.value_or(0.0));
  const T mom = static_cast<T>(o.momentum), damp = static_cast<T>(1.0 - o.dampening);
  const bool first = s.step[k] == 0;
  for (size_t i = 0; i < g.size(); ++i) {
    T d = g[i] + wd * s.w[k][i];
    if (o.momentum != 0) {
      T b = first ? d : mom * s.m[k][i] + damp * d;
      s.m[k][i] = b;
      d = o.nesterov ? d + mom * b : b;
    }
    s.w[k][i] -= lr_t * d;
  }
  if (o.momentum != 0) ++s.step[k];
}

template <typename T>
void ref_adamw(RefState<T>& s, size_t k, const std::vector<T>& g, const OptimizerOptions& o, double lr) {
  const int64_t t = ++s.step[k];
  const double b1 = o.beta1, b2 = o.beta2, wd_d = *o.weight_decay, eps = *o.eps;
  const T beta1 = static_cast<T>(b1), beta2 = static_cast<T>(b2);
  const T keep1 = static_cast<T>(1.0 - b1), keep2 = static_cast<T>(1.0 - b2), e = static_cast<T>(eps);
  const T decay = static_cast<T>(1.0 - lr * wd_d);
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(b1, static_cast<double>(t))));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))));
  for (size_t i = 0; i < g.size(); ++i) {
    const T pv = s.w[k][i] * decay;
    const T mv = beta1 * s.m[k][i] + keep1 * g[i];
    const T vv = beta2 * s.v[k][i] + keep2 * g[i] * g[i];
    s.m[k][i] = mv;
    s.v[k][i] = vv;
    s.w[k][i] = pv - step_size * (mv / (std::sqrt(vv) / bc2_sqrt + e));
  }
}

// LAMB over every parameter with a gradient (null entries: none this step); sums in f64.
template <typename T>
void ref_lamb(RefState<T>& s, const std::vector<const std::vector<T>*>& grads, const OptimizerOptions& o, double lr) {
  struct Scalars {
    T beta1, beta2, keep1, keep2, eps, wd, bc1, bc2_sqrt;
    T direction(T m, T v, T w) const { return (m / bc1) / (std::sqrt(v) / bc2_sqrt + eps) + wd * w; }
  };
  auto scalars = [&](int64_t t) {
    const double b1 = o.beta1, b2 = o.beta2;
    return Scalars{static_cast<T>(b1), static_cast<T>(b2), static_cast<T>(1.0 - b1), static_cast<T>(1.0 - b2),
                   static_cast<T>(*o.eps), static_cast<T>(*o.weight_decay),
                   static_cast<T>(1.0 - std::pow(b1, static_cast<double>(t))),
                   static_cast<T>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))))};
  };
  std::vector<double> sums(2 * grads.size(), 0.0);
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k]) continue;
    const Scalars c = scalars(++s.step[k]);
    double wsq = 0, usq = 0;
    for (size_t i = 0; i < grads[k]->size(); ++i) {
      const T g = (*grads[k])[i];
      s.m[k][i] = c.beta1 * s.m[k][i] + c.keep1 * g;
      s.v[k][i] = c.beta2 * s.v[k][i] + c.keep2 * g * g;
      const double u = static_cast<double>(c.direction(s.m[k][i], s.v[k][i], s.w[k][i]));
      wsq += static_cast<double>(s.w[k][i]) * static_cast<double>(s.w[k][i]);
      usq += u * u;
    }
    sums[2 * k] += wsq;
    sums[2 * k + 1] += usq;
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k]) continue;
    const Scalars c = scalars(s.step[k]);
    const double wn = std::sqrt(sums[2 * k]), un = std::sqrt(sums[2 * k + 1]);
    const T step = static_cast<T>(lr * (wn > 0 && un > 0 ? wn / un : 1.0));
    for (size_t i = 0; i < grads[k]->size(); ++i) s.w[k][i] -= step * c.direction(s.m[k][i], s.v[k][i], s.w[k][i]);
  }
}

// ---- the problem: random starting values and gradients, one parameter missing at two steps ----
template <typename T>
std::vector<T> values(const Tensor& t) {
  const Tensor c = t.detach().to(Device::cpu());
  return std::vector<T>(c.data<T>(), c.data<T>() + c.numel());
}

bool has_grad(size_t k, int step) { return !(k == 2 && (step == 1 || step == 4)); }
double lr_at_step(double base, int step) { return step >= 3 ? base * 0.5 : base; }

std::vector<Tensor> starting_values(DType dt) {
  Generator gen(31);
  std::vector<Tensor> out;
  for (int64_t n : kSizes) out.push_back(randn({n}, gen).to(dt));
  return out;
}

std::vector<std::vector<Tensor>> gradient_sequence(DType dt, int steps) {
  Generator gen(47);
  std::vector<std::vector<Tensor>> out(static_cast<size_t>(steps));
  for (auto& step : out)
    for (int64_t n : kSizes) step.push_back(randn({n}, gen).to(dt));
  return out;
}

NamedTensors fresh_params(DType dt) {
  NamedTensors named;
  const auto start = starting_values(dt);
  for (size_t k = 0; k < start.size(); ++k) {
    Tensor p = start[k].clone();
    p.set_requires_grad(true);
    named.emplace_back("p" + std::to_string(k), p);
  }
  return named;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// kSteps through the library (step() or step(zero flag)) and through the reference; compares
// parameters and state bitwise after the last step.
template <typename T>
void check_against_reference(const std::string& name, const OptimizerOptions& o, bool with_flag) {
  const DType dt = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  NamedTensors named = fresh_params(dt);
  auto opt = make_optimizer(name, named, o);
  const Tensor zero_flag = Tensor::zeros({1});
  RefState<T> ref;
  for (const auto& [_, p] : named) {
    ref.w.push_back(values<T>(p));
    ref.m.emplace_back(static_cast<size_t>(p.numel()), T(0));
    ref.v.emplace_back(static_cast<size_t>(p.numel()), T(0));
    ref.step.push_back(0);
  }
  const auto grads = gradient_sequence(dt, kSteps);
  for (int t = 0; t < kSteps; ++t) {
    const double lr = lr_at_step(*o.lr, t);
    opt->set_lr(lr);
    std::vector<std::vector<T>> g(kSizes.size());
    std::vector<const std::vector<T>*> present(kSizes.size(), nullptr);
    for (size_t k = 0; k < kSizes.size(); ++k) {
      named[k].second.set_grad(has_grad(k, t) ? grads[t][k] : Tensor());
      g[k] = values<T>(grads[t][k]);
      if (has_grad(k, t)) present[k] = &g[k];
    }
    if (with_flag) {
      opt->step(zero_flag);
    } else {
      opt->step();
    }
    if (name == "lamb") {
      ref_lamb(ref, present, o, lr);
    } else {
      for (size_t k = 0; k < kSizes.size(); ++k) {
        if (!present[k]) continue;
        if (name == "sgd") ref_sgd(ref, k, g[k], o, lr);
        if (name == "adamw") ref_adamw(ref, k, g[k], o, lr);
      }
    }
  }
  for (size_t k = 0; k < kSizes.size(); ++k) {
    CAPTURE(k);
    CHECK(same_bits(values<T>(named[k].second), ref.w[k]));
  }
  const NamedTensors state = opt->state();
  size_t checked = 0;
  for (const auto& [key, t] : state) {
    CAPTURE(key);
    const size_t k = static_cast<size_t>(std::stoi(key.substr(1, key.find('.') - 1)));
    const std::string what = key.substr(key.find('.') + 1);
    if (what == "step") {
      CHECK(t.item() == static_cast<double>(ref.step[k]));
    } else {
      CHECK(same_bits(values<T>(t.view({-1})), what == "exp_avg_sq" ? ref.v[k] : ref.m[k]));
    }
    ++checked;
  }
  const size_t per_param = name == "sgd" ? (o.momentum != 0 ? 1 : 0) : 3;
  CHECK(checked == per_param * kSizes.size());
}

OptimizerOptions sgd_options(double momentum, double dampening, bool nesterov, double wd) {
  OptimizerOptions o;
  o.lr = 0.1, o.momentum = momentum, o.dampening = dampening, o.nesterov = nesterov, o.weight_decay = wd;
  return o;
}

OptimizerOptions adam_options(double lr, double wd, double b1, double b2, double eps) {
  OptimizerOptions o;
  o.lr = lr, o.weight_decay = wd, o.beta1 = b1, o.beta2 = b2, o.eps = eps;
  return o;
}

std::vector<std::pair<std::string, OptimizerOptions>> all_setups() {
  return {{"sgd", sgd_options(0.9, 0.0, true, 1e-4)},     {"sgd", sgd_options(0.8, 0.3, false, 0.0)},
          {"sgd", sgd_options(0.0, 0.0, false, 5e-4)},    {"adamw", adam_options(1e-2, 0.1, 0.9, 0.999, 1e-8)},
          {"adamw", adam_options(3e-3, 0.0, 0.8, 0.99, 1e-6)}, {"lamb", adam_options(1e-2, 0.1, 0.9, 0.999, 1e-6)},
          {"lamb", adam_options(5e-3, 0.0, 0.85, 0.98, 1e-6)}};
}

}  // namespace

TEST_CASE("the optimizers with tensor update counts equal the former CPU loops bit for bit") {
  for (const auto& [name, o] : all_setups()) {
    for (bool with_flag : {false, true}) {
      CAPTURE(name);
      CAPTURE(o.momentum);
      CAPTURE(with_flag);  // step(found_inf = 0) is the same update
      check_against_reference<float>(name, o, with_flag);
      check_against_reference<double>(name, o, with_flag);
    }
  }
}

namespace {
// Everything an optimizer holds, as bytes: parameters and state() (counts included).
std::vector<std::vector<double>> snapshot(const NamedTensors& named, const Optimizer& opt) {
  std::vector<std::vector<double>> out;
  for (const auto& [_, p] : named) out.push_back(p.to_vector_f64());
  for (const auto& [key, t] : opt.state()) {
    out.push_back(t.view({-1}).to_vector_f64());
    out.back().push_back(static_cast<double>(std::hash<std::string>{}(key)));
  }
  return out;
}

Tensor with_inf(const Tensor& g) {
  std::vector<double> v = g.to_vector_f64();
  v[1] = std::numeric_limits<double>::infinity();
  v[0] = std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_vector_f64(v, g.shape(), g.dtype());
}
}  // namespace

TEST_CASE("a step skipped by found_inf changes nothing, and the run goes on as if it had not happened") {
  // Flagged steps carry inf/NaN gradients; the first step is one of them, so SGD's new momentum
  // buffer must still take buf = d_p at the first step that is applied.
  const std::vector<bool> flagged{true, false, false, true, true, false, false};
  for (const auto& [name, o] : all_setups()) {
    for (DType dt : {DType::F32, DType::F64}) {
      CAPTURE(name);
      CAPTURE(o.momentum);
      CAPTURE(dtype_name(dt));
      const auto grads = gradient_sequence(dt, static_cast<int>(flagged.size()));
      NamedTensors skipping = fresh_params(dt), clean = fresh_params(dt);
      auto opt_skip = make_optimizer(name, skipping, o);
      auto opt_clean = make_optimizer(name, clean, o);
      Tensor flag = Tensor::zeros({1});
      int applied = 0;
      for (size_t t = 0; t < flagged.size(); ++t) {
        for (size_t k = 0; k < kSizes.size(); ++k) {
          const Tensor& g = grads[t][k];
          skipping[k].second.set_grad(has_grad(k, static_cast<int>(t)) ? (flagged[t] ? with_inf(g) : g) : Tensor());
          if (!flagged[t]) clean[k].second.set_grad(has_grad(k, static_cast<int>(t)) ? g : Tensor());
        }
        flag.fill_(flagged[t] ? 1.0 : 0.0);
        const auto before = snapshot(skipping, *opt_skip);
        opt_skip->step(flag);
        if (flagged[t]) {
          CHECK(snapshot(skipping, *opt_skip) == before);  // parameters, buffers and counts untouched
          continue;
        }
        opt_clean->step();
        ++applied;
        CHECK(snapshot(skipping, *opt_skip) == snapshot(clean, *opt_clean));
      }
      CHECK(applied == 4);
      CHECK(opt_skip->steps() == static_cast<int64_t>(flagged.size()));  // calls, skipped ones included
      // The counts saved are the applied updates only.
      for (const auto& [key, t] : opt_skip->state())
        if (key == "p0.step") CHECK(t.item() == 4.0);
    }
  }
}

TEST_CASE("a parameter whose only steps were skipped has no state, and resumes as a fresh one") {
  for (const std::string name : {"sgd", "adamw", "lamb"}) {
    CAPTURE(name);
    OptimizerOptions o = name == "sgd" ? sgd_options(0.9, 0.2, false, 0.0) : adam_options(1e-2, 0.1, 0.9, 0.999, 1e-6);
    NamedTensors a = fresh_params(DType::F32), b = fresh_params(DType::F32);
    auto straight = make_optimizer(name, a, o);
    for (auto& [_, p] : a) p.set_grad(Tensor::ones(p.shape()));
    straight->step(Tensor::ones({1}));  // skipped: buffers exist, but hold no history
    CHECK(straight->state().empty());
    auto resumed = make_optimizer(name, b, o);
    resumed->load_state(straight->state());
    const auto grads = gradient_sequence(DType::F32, 1);
    for (size_t k = 0; k < kSizes.size(); ++k) {
      a[k].second.set_grad(grads[0][k]);
      b[k].second.set_grad(grads[0][k]);
    }
    straight->step();
    resumed->step();
    for (size_t k = 0; k < kSizes.size(); ++k) CHECK(a[k].second.to_vector() == b[k].second.to_vector());
    const NamedTensors sa = straight->state(), sb = resumed->state();
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); ++i) CHECK(sa[i].second.to_vector_f64() == sb[i].second.to_vector_f64());
  }
}

TEST_CASE("SGD's momentum history survives a checkpoint: a loaded buffer is not a first step") {
  // Resumed after one applied step, the next step must use the momentum update (dampening 0.5
  // tells the two apart: a first step would write buf = d_p).
  const OptimizerOptions o = sgd_options(0.9, 0.5, false, 0.0);
  NamedTensors a = fresh_params(DType::F64), b = fresh_params(DType::F64);
  auto straight = make_optimizer("sgd", a, o);
  auto first = make_optimizer("sgd", b, o);
  const auto grads = gradient_sequence(DType::F64, 2);
  for (int t = 0; t < 2; ++t) {
    for (size_t k = 0; k < kSizes.size(); ++k) a[k].second.set_grad(grads[t][k]);
    straight->step();
  }
  for (size_t k = 0; k < kSizes.size(); ++k) b[k].second.set_grad(grads[0][k]);
  first->step();
  auto resumed = make_optimizer("sgd", b, o);
  resumed->load_state(first->state());
  for (size_t k = 0; k < kSizes.size(); ++k) b[k].second.set_grad(grads[1][k]);
  resumed->step();
  for (size_t k = 0; k < kSizes.size(); ++k) CHECK(a[k].second.to_vector_f64() == b[k].second.to_vector_f64());
}

TEST_CASE("capturable(): SGD and AdamW always, LAMB unless its norm hook goes through the host") {
  NamedTensors named = fresh_params(DType::F32);
  CHECK(make_optimizer("sgd", named, sgd_options(0.9, 0, false, 0))->capturable());
  CHECK(make_optimizer("adamw", named, {})->capturable());
  CHECK(make_optimizer("lamb", named, {})->capturable());
  OptimizerOptions host_hook;
  host_hook.norm_reduce = [](std::vector<double>&) {};
  CHECK_FALSE(make_optimizer("lamb", named, host_hook)->capturable());
  OptimizerOptions device_hook;
  device_hook.norm_reduce_device = [](Tensor&) {};
  CHECK(make_optimizer("lamb", named, device_hook)->capturable());
  OptimizerOptions both = host_hook;
  both.norm_reduce_device = device_hook.norm_reduce_device;
  auto lamb = make_optimizer("lamb", named, both);
  for (auto& [_, p] : named) p.set_grad(Tensor::ones(p.shape()));
  CHECK_THROWS_AS(lamb->step(), Error);
}

TEST_CASE("step(found_inf) refuses a flag of the wrong size or dtype") {
  NamedTensors named = fresh_params(DType::F32);
  auto opt = make_optimizer("adamw", named, {});
  for (auto& [_, p] : named) p.set_grad(Tensor::ones(p.shape()));
  CHECK_THROWS_AS(opt->step(Tensor::zeros({2})), Error);
  CHECK_THROWS_AS(opt->step(Tensor::zeros({1}, DType::I32)), Error);
  CHECK(opt->state().empty());  // refused before anything moved
}
