// tests/test_amp.cpp: mixed precision on the CPU - 16-bit ops, the autocast policy, the loss scaler,
// the fused unscale + inf/NaN check and the f32 master weights.
//
// How the 16-bit ops are judged. A CPU kernel given f16/bf16 tensors computes in f32 on widened
// copies and rounds its outputs once (core/ops/common/cpu/widen.h). So for a single-kernel op, the 16-bit
// output must EQUAL the f32 op's output on the same (already 16-bit) input values, rounded to the
// 16-bit dtype: tolerance 0. Gradients pass through 16-bit intermediates (the incoming gradient and
// each op's result are rounded), so they are compared with a tolerance of a few units in the last
// place of the dtype: 4 * 2^-8 relative for bf16 (8 significand bits), 4 * 2^-11 for f16, plus the
// same times the largest magnitude as an absolute floor for values near zero (cancellation).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/amp_cast.h"
#include "layers/models/models.h"
#include "optim/amp.h"
#include "optim/loss_scaler.h"

using namespace tandem;

namespace {

const DType kLow[] = {DType::BF16, DType::F16};

double ulp_rel(DType t) { return t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g);
}

// x in dtype t with requires_grad, and its exact f32 twin (same values) with requires_grad.
std::pair<Tensor, Tensor> twin(const Tensor& x32, DType t) {
  Tensor low = ops::cast_raw(x32, t).set_requires_grad(true);
  Tensor ref = ops::cast_raw(low, DType::F32).set_requires_grad(true);
  return {low, ref};
}

// sum(y * r) for a fixed random r: a loss whose gradient is not degenerate (a plain sum of a
// batch-normalised output has a zero input gradient, all rounding noise).
Tensor weighted_sum(const Tensor& y) {
  return ops::sum(ops::mul(ops::cast(y, DType::F32), rnd(y.shape(), 77)));
}

void check_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  std::vector<float> a = got.to_vector(), b = want.to_vector();
  REQUIRE(a.size() == b.size());
  double big = 0;
  for (float v : b) big = std::max(big, static_cast<double>(std::fabs(v)));
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = rel * (std::fabs(b[i]) + big);
    if (!(std::fabs(a[i] - b[i]) <= tol) && bad++ < 5) MESSAGE(what, "[", i, "]: ", a[i], " vs ", b[i]);
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", a.size(), " values outside the tolerance");
}

// Runs `op` on 16-bit inputs and on their f32 twins: the forward must be the rounded f32 result
// exactly (or equal in f32 when the policy's output is f32), the input gradients close.
void check_op(const char* name, const std::vector<Tensor>& inputs32,
              const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  for (DType t : kLow) {
    CAPTURE(std::string(dtype_name(t)));
    std::vector<Tensor> low, ref;
    for (const Tensor& x : inputs32) {
      auto [l, r] = twin(x, t);
      low.push_back(l);
      ref.push_back(r);
    }
    Tensor y = op(low), yr = op(ref);
    const bool f32_out = autocast::rule(name).output == autocast::Precision::F32;
    CHECK(y.dtype() == (f32_out ? DType::F32 : t));
    check_close(y, f32_out ? yr : ops::cast_raw(yr, t), 0.0, name);
    weighted_sum(y).backward();
    weighted_sum(yr).backward();
    for (size_t i = 0; i < low.size(); ++i) {
      CHECK(low[i].grad().dtype() == t);
      check_close(low[i].grad(), ref[i].grad(), 4 * ulp_rel(t), name);
    }
  }
}

}  // namespace

TEST_CASE("CPU ops take f16/bf16, compute in f32 and round once") {
  check_op("conv2d", {rnd({2, 6, 6, 3}, 1), rnd({4, 3, 3, 3}, 2)}, [](const std::vector<Tensor>& v) {
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    return ops::conv2d(v[0], v[1], Tensor(), p);
  });
  check_op("linear", {rnd({5, 7}, 3), rnd({4, 7}, 4), rnd({4}, 5)},
           [](const std::vector<Tensor>& v) { return ops::linear(v[0], v[1], v[2]); });
  check_op("matmul", {rnd({2, 3, 4}, 6), rnd({2, 4, 5}, 7)},
           [](const std::vector<Tensor>& v) { return ops::matmul(v[0], v[1]); });
  check_op("elementwise", {rnd({3, 8}, 8), rnd({3, 8}, 9)},
           [](const std::vector<Tensor>& v) { return ops::relu(ops::add(v[0], v[1])); });
  check_op("elementwise", {rnd({4, 6}, 10)}, [](const std::vector<Tensor>& v) { return ops::gelu(v[0]); });
  check_op("pool", {rnd({2, 4, 4, 3}, 11)}, [](const std::vector<Tensor>& v) {
    return ops::max_pool2d(v[0], ops::Pool2dParams{});
  });
  check_op("pool", {rnd({2, 4, 4, 3}, 12)}, [](const std::vector<Tensor>& v) { return ops::global_avg_pool(v[0]); });
  check_op("layer_norm", {rnd({3, 16}, 13), rnd({16}, 14), rnd({16}, 15)},
           [](const std::vector<Tensor>& v) { return ops::layer_norm(v[0], v[1], v[2]); });
  check_op("cross_entropy", {rnd({6, 5}, 16)}, [](const std::vector<Tensor>& v) {
    return ops::cross_entropy(v[0], Tensor::from_vector_i64({0, 1, 2, 3, 4, 0}, {6}));
  });
  check_op("embedding", {rnd({5, 4}, 17)}, [](const std::vector<Tensor>& v) {
    return ops::embedding(Tensor::from_vector_i64({4, 0, 2, 2}, {4}), v[0]);
  });
  check_op("sum", {rnd({7, 9}, 18)}, [](const std::vector<Tensor>& v) { return ops::mean(v[0]); });
}

TEST_CASE("batch_norm: 16-bit x with f32 weight, bias and statistics (the AMP policy)") {
  for (DType t : kLow) {
    CAPTURE(std::string(dtype_name(t)));
    auto [x, xr] = twin(rnd({4, 3, 3, 5}, 20), t);
    Tensor w = rnd({5}, 21).set_requires_grad(true), b = rnd({5}, 22).set_requires_grad(true);
    Tensor w2 = w.detach().clone().set_requires_grad(true), b2 = b.detach().clone().set_requires_grad(true);
    Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5}), rm2 = Tensor::zeros({5}), rv2 = Tensor::ones({5});
    Tensor y = ops::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    Tensor yr = ops::batch_norm(xr, w2, b2, rm2, rv2, true, 0.1, 1e-5);
    CHECK(y.dtype() == t);
    check_close(y, ops::cast_raw(yr, t), 0.0, "batch_norm y");
    check_close(rm, rm2, 0.0, "running_mean");  // f32 statistics of the same values: identical
    check_close(rv, rv2, 0.0, "running_var");
    weighted_sum(y).backward();
    weighted_sum(yr).backward();
    CHECK(w.grad().dtype() == DType::F32);
    check_close(x.grad(), xr.grad(), 4 * ulp_rel(t), "batch_norm dx");
    check_close(w.grad(), w2.grad(), 4 * ulp_rel(t), "batch_norm dweight");
    check_close(b.grad(), b2.grad(), 4 * ulp_rel(t), "batch_norm dbias");
  }
}

TEST_CASE("autocast policy: one table, the documented decisions") {
  using P = autocast::Precision;
  CHECK(autocast::rule("conv2d").compute == P::Low);
  CHECK(autocast::rule("linear").compute == P::Low);
  CHECK(autocast::rule("batch_norm").compute == P::F32);
  CHECK(autocast::rule("batch_norm").parameters == P::F32);
  CHECK(autocast::rule("batch_norm").output == P::Low);
  CHECK(autocast::rule("cross_entropy").output == P::F32);
  CHECK(autocast::rule("layer_norm").compute == P::F32);
  CHECK(autocast::rule("sum").compute == P::F32);
  CHECK(autocast::rule("softmax").compute == P::F32);  // the encoder's f32 reductions (train_encoder --amp)
  CHECK(autocast::rule("gelu").compute == P::F32);
  CHECK(autocast::rule("embedding").reason.find("f32") != std::string::npos);
  for (const auto& r : autocast::policy()) CHECK_MESSAGE(!r.reason.empty(), r.op, " has no reason written down");
  CHECK_THROWS_WITH_AS(autocast::rule("nope"), doctest::Contains("known ops"), Error);
  CHECK(autocast::parameter_dtype("batch_norm", DType::F16) == DType::F32);
  CHECK(autocast::parameter_dtype("conv2d", DType::BF16) == DType::BF16);
  CHECK(autocast::stats_dtype(DType::BF16) == DType::F32);
  CHECK(autocast::amp_dtype_from_name("fp16") == DType::F16);
  CHECK_THROWS_AS(autocast::amp_dtype_from_name("fp8"), Error);

  // The model cast follows the table: BatchNorm stays f32, conv and linear go 16-bit.
  ModulePtr m = models::create_model("small_cnn", 4, 1);
  cast_for_amp(*m, DType::BF16);
  int bn = 0, low = 0;
  for (const auto& [name, mod] : m->named_modules())
    for (const auto& [pn, p] : mod->named_parameters()) {
      if (pn.find('.') != std::string::npos) continue;
      if (amp_policy_op(*mod) == "batch_norm") {
        CHECK(p.dtype() == DType::F32);
        ++bn;
      } else {
        CHECK(p.dtype() == DType::BF16);
        ++low;
      }
    }
  CHECK(bn > 0);
  CHECK(low > 0);
}

TEST_CASE("LossScaler: GradScaler's defaults, growth after the interval, backoff and skip on overflow") {
  optim::LossScaler s;
  CHECK(s.scale() == 65536.0);
  optim::LossScalerOptions o;
  o.growth_interval = 3;
  optim::LossScaler g(o);
  CHECK(g.update(false));
  CHECK(g.update(false));
  CHECK(g.scale() == 65536.0);
  CHECK(g.update(false));
  CHECK(g.scale() == 131072.0);  // x2 after 3 clean steps
  CHECK_FALSE(g.update(true));   // overflow: skip and halve
  CHECK(g.scale() == 65536.0);
  CHECK(g.skipped_steps() == 1);
  CHECK(g.update(false));
  CHECK(g.growth_tracker() == 1);  // the overflow reset the count

  optim::LossScaler copy(o);
  copy.load_state(g.state());
  CHECK(copy.scale() == g.scale());
  CHECK(copy.growth_tracker() == g.growth_tracker());
  CHECK(copy.skipped_steps() == 1);

  optim::LossScalerOptions bf;
  bf.enabled = false;  // bf16: scale fixed at 1, overflow still skips
  optim::LossScaler b(bf);
  CHECK(b.scale() == 1.0);
  CHECK_FALSE(b.update(true));
  CHECK(b.scale() == 1.0);
  CHECK(b.skipped_steps() == 1);
}

TEST_CASE("MasterWeights: f32 masters, fused unscale finds inf and NaN, round trip to 16-bit") {
  for (DType t : kLow) {
    CAPTURE(std::string(dtype_name(t)));
    Tensor w = ops::cast_raw(Tensor::from_vector({1.0f, -2.5f, 3.0e-3f, 100.0f}, {2, 2}), t).set_requires_grad(true);
    Tensor bn = Tensor::from_vector({0.5f, 0.25f}, {2}).set_requires_grad(true);  // f32: its own master
    optim::MasterWeights mw(optim::segments_from_parameters({{"w", w}, {"bn", bn}}));
    auto ms = mw.master_segments();
    REQUIRE(ms.size() == 2);
    CHECK(ms[0].param.dtype() == DType::F32);
    CHECK(ms[0].param.to_vector() == ops::cast_raw(w, DType::F32).to_vector());  // widening is exact
    CHECK(ms[1].param.shares_storage(bn));

    // Unscale: grad * (1/scale) in f32, no overflow.
    Tensor g = ops::cast_raw(Tensor::from_vector({1024.0f, -2048.0f, 0.5f, 4.0f}, {2, 2}), t);
    Tensor gb = Tensor::from_vector({8.0f, 16.0f}, {2});
    CHECK_FALSE(mw.unscale_and_check({g, gb}, 1.0 / 1024.0));
    CHECK(mw.master_grads()[0].to_vector() == std::vector<float>{1.0f, -2.0f, 0.5f / 1024.0f, 4.0f / 1024.0f});
    CHECK(mw.master_grads()[1].to_vector() == std::vector<float>{8.0f / 1024.0f, 16.0f / 1024.0f});
    // Undefined gradient: no master gradient (the optimizer skips it).
    CHECK_FALSE(mw.unscale_and_check({g, Tensor()}, 1.0));
    CHECK_FALSE(mw.master_grads()[1].defined());

    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      Tensor gi = ops::cast_raw(Tensor::from_vector({1.0f, bad, 0.0f, 2.0f}, {2, 2}), t);
      CHECK(mw.unscale_and_check({gi, gb}, 1.0 / 65536.0));  // a tiny inverse scale must not hide it
      Tensor gf = Tensor::from_vector({1.0f, bad}, {2});
      CHECK(mw.unscale_and_check({g, gf}, 1.0));  // also in an f32 gradient
    }

    // Round trip: masters take a small update that 16-bit alone would lose, copy_to_model rounds.
    Tensor m0 = ms[0].param;
    m0.copy_(Tensor::from_vector({1.0f + 1e-4f, -2.5f, 3.0e-3f, 100.0f}, {2, 2}));
    mw.copy_to_model();
    CHECK(w.to_vector() == ops::cast_raw(ops::cast_raw(m0, t), DType::F32).to_vector());
    CHECK(m0.to_vector()[0] == 1.0f + 1e-4f);  // the master keeps what 16-bit rounds away

    // Checkpoint slices hold the 16-bit parameters' masters only, and load back.
    auto slices = mw.state_slices();
    REQUIRE(slices.size() == 1);
    CHECK(slices[0].key == "w");
    auto saved = optim::assemble_state(slices);
    for (auto& [k, v] : saved) v = v.clone();  // a copy, whatever assemble_state shares
    m0.fill_(0.0);
    mw.load_state(saved);
    CHECK(m0.to_vector()[0] == 1.0f + 1e-4f);
  }
}

TEST_CASE("amp_step: fp16 overflow skips the step, lowers the scale, leaves the parameters alone") {
  Tensor w = ops::cast_raw(Tensor::from_vector({1.0f, 2.0f}, {2}), DType::F16).set_requires_grad(true);
  optim::MasterWeights mw(optim::segments_from_parameters({{"w", w}}));
  optim::OptimizerOptions oo;
  oo.lr = 0.5;
  auto opt = optim::make_optimizer("sgd", mw.master_segments(), 1, oo);
  optim::LossScaler scaler;
  Tensor inf = ops::cast_raw(Tensor::from_vector({1.0f, std::numeric_limits<float>::infinity()}, {2}), DType::F16);
  CHECK_FALSE(optim::amp_step(mw, scaler, *opt, {inf}));
  CHECK(scaler.scale() == 32768.0);
  CHECK(w.to_vector() == std::vector<float>{1.0f, 2.0f});
  Tensor g = ops::cast_raw(Tensor::from_vector({32768.0f, -32768.0f}, {2}), DType::F16);  // grad 1, -1 scaled
  CHECK(optim::amp_step(mw, scaler, *opt, {g}));
  CHECK(w.to_vector() == std::vector<float>{0.5f, 2.5f});
  CHECK(scaler.skipped_steps() == 1);
}

// ---- tensor mode: the captured step's loss scaler and AMP step (optim/amp.h "A captured step") ----

namespace {
optim::LossScalerOptions tensor_mode(optim::LossScalerOptions o) {
  o.device = Device::cpu();
  return o;
}
}  // namespace

TEST_CASE("LossScaler tensor mode follows the host scaler's scale sequence over a scripted overflow pattern") {
  // Overflows alone, in runs, right after a growth and at the first step; interval 3 so growth
  // happens often. 40 steps, both enabled (fp16) and disabled (bf16: scale 1, skips still counted).
  const std::string pattern = "xx..x....x......xx.xxx.........x...x.....";
  for (bool enabled : {true, false}) {
    CAPTURE(enabled);
    optim::LossScalerOptions o;
    o.init_scale = 1024.0;
    o.growth_interval = 3;
    o.enabled = enabled;
    optim::LossScaler host(o), dev(tensor_mode(o));
    CHECK(dev.tensor_mode());
    CHECK_FALSE(host.tensor_mode());
    int grew = 0, backed_off = 0;
    for (char c : pattern) {
      const bool overflow = c == 'x';
      const double before = host.scale();
      dev.found_inf().fill_(overflow ? 1.0 : 0.0);
      host.update(overflow);
      dev.update_on_device();
      grew += host.scale() > before;
      backed_off += host.scale() < before;
      CHECK(dev.scale() == host.scale());
      CHECK(dev.growth_tracker() == host.growth_tracker());
      CHECK(dev.skipped_steps() == host.skipped_steps());
      CHECK(dev.scale_tensor().item() == host.scale());
    }
    CHECK(host.skipped_steps() == 11);
    if (enabled) CHECK((grew >= 5 && backed_off >= 5));  // the pattern exercises both rules
    // Checkpoints move between the modes: the same names and values.
    const optim::NamedTensors hs = host.state(), ds = dev.state();
    REQUIRE(hs.size() == ds.size());
    for (size_t i = 0; i < hs.size(); ++i) {
      CHECK(hs[i].first == ds[i].first);
      CHECK(hs[i].second.item() == ds[i].second.item());
    }
    optim::LossScaler loaded(tensor_mode(o));
    loaded.load_state(hs);
    CHECK(loaded.scale() == host.scale());
    CHECK(loaded.skipped_steps() == host.skipped_steps());
    CHECK(loaded.growth_tracker() == host.growth_tracker());
  }
}

TEST_CASE("LossScaler tensor mode: host-only calls are refused, growth stops below f32's overflow") {
  optim::LossScaler dev(tensor_mode({}));
  CHECK_THROWS_AS(dev.update(false), Error);
  optim::LossScaler host;
  CHECK_THROWS_AS(host.found_inf(), Error);
  CHECK_THROWS_AS(host.update_on_device(), Error);
  optim::LossScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);  // f32's largest power of two
  o.growth_interval = 1;
  optim::LossScaler top(tensor_mode(o));
  top.update_on_device();  // found_inf() starts at 0: a clean step, growth due, but 2^128 is inf in f32
  CHECK(top.scale() == std::ldexp(1.0, 127));
  CHECK(top.growth_tracker() == 0);
  // scale_loss multiplies on the device and stays differentiable.
  Tensor x = Tensor::from_vector({3.0f}, {1}).set_requires_grad(true);
  Tensor loss = ops::sum(x);
  optim::LossScaler s(tensor_mode({}));
  Tensor scaled = s.scale_loss(loss);
  CHECK(scaled.item() == 3.0 * 65536.0);
  scaled.backward();
  CHECK(x.grad().item() == 65536.0);
}

TEST_CASE("unscale_and_flag equals unscale_and_check, and resets the flag every step") {
  for (DType t : kLow) {
    CAPTURE(std::string(dtype_name(t)));
    Tensor w = ops::cast_raw(Tensor::from_vector({1.0f, -2.5f, 3.0e-3f, 100.0f}, {2, 2}), t);
    Tensor bn = Tensor::from_vector({0.5f, 0.25f}, {2});
    optim::MasterWeights eager(optim::segments_from_parameters({{"w", w}, {"bn", bn}}));
    optim::MasterWeights dev(optim::segments_from_parameters({{"w", w}, {"bn", bn}}));
    Tensor scale = Tensor::from_vector({3072.0f}, {1});  // not a power of two: exercises the rounding of 1/scale
    Tensor flag = Tensor::from_vector({1.0f}, {1});      // left over from a previous step
    Tensor g = ops::cast_raw(Tensor::from_vector({1024.0f, -2048.0f, 0.5f, 7.0f}, {2, 2}), t);
    Tensor gb = Tensor::from_vector({8.0f, 16.0f}, {2});
    CHECK_FALSE(eager.unscale_and_check({g, gb}, 1.0 / 3072.0));
    dev.unscale_and_flag({g, gb}, scale, flag);
    CHECK(flag.item() == 0.0);
    for (size_t i = 0; i < 2; ++i) CHECK(dev.master_grads()[i].to_vector() == eager.master_grads()[i].to_vector());
    Tensor gi = ops::cast_raw(Tensor::from_vector({1.0f, std::numeric_limits<float>::infinity(), 0.0f, 2.0f}, {2, 2}), t);
    dev.unscale_and_flag({gi, gb}, scale, flag);
    CHECK(flag.item() == 1.0);
    dev.unscale_and_flag({g, Tensor()}, scale, flag);  // undefined: no master gradient, as eager
    CHECK(flag.item() == 0.0);
    CHECK_FALSE(dev.master_grads()[1].defined());
    // copy_to_model(flag): the masters reach the model only on a clean step.
    Tensor master = dev.master_segments()[0].param;
    master.fill_(7.0);
    flag.fill_(1.0);
    dev.copy_to_model(flag);
    CHECK(w.to_vector()[0] == 1.0f);
    flag.fill_(0.0);
    dev.copy_to_model(flag);
    CHECK(w.to_vector()[0] == 7.0f);
  }
}

TEST_CASE("amp_step_device equals amp_step bit for bit: parameters, masters, state, scale, skips") {
  // 12 steps with overflows (inf and NaN, one at the first step) and clipping on every other step.
  for (const std::string name : {"sgd", "adamw", "lamb"}) {
    for (DType low : kLow) {
      CAPTURE(name);
      CAPTURE(std::string(dtype_name(low)));
      struct Run {
        optim::NamedTensors params;
        std::unique_ptr<optim::MasterWeights> master;
        std::unique_ptr<optim::Optimizer> opt;
        optim::LossScaler scaler;
      };
      auto make = [&](bool device) {
        Run r;
        Generator gen(9);
        const std::vector<Shape> shapes{{3, 5}, {70}, {4}};
        for (size_t i = 0; i < shapes.size(); ++i)
          r.params.emplace_back("p" + std::to_string(i), randn(shapes[i], gen).to(i == 2 ? DType::F32 : low));
        r.master = std::make_unique<optim::MasterWeights>(optim::segments_from_parameters(r.params));
        optim::OptimizerOptions oo;
        oo.lr = 1e-2;
        if (name == "sgd") oo.momentum = 0.9, oo.dampening = 0.1;
        r.opt = optim::make_optimizer(name, r.master->master_segments(), 3, oo);
        optim::LossScalerOptions so;
        so.init_scale = 4096.0;
        so.growth_interval = 2;
        so.enabled = low == DType::F16;
        if (device) so.device = Device::cpu();
        r.scaler = optim::LossScaler(so);
        return r;
      };
      Run eager = make(false), dev = make(true);
      optim::GradClipper clipper(0.05);
      Generator gen(21);
      for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        std::vector<Tensor> grads;
        for (const auto& [_, p] : eager.params) {
          Tensor g = randn(p.shape(), gen);
          if ((step == 0 || step == 5 || step == 6) && p.dtype() != DType::F32) {
            std::vector<float> v = g.to_vector();
            v[2] = step == 5 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
            g = Tensor::from_vector(v, p.shape());
          }
          grads.push_back(ops::cast_raw(ops::scale(g, 512.0f), p.dtype()));
        }
        optim::AmpStepOptions ao;
        ao.clip_grad_norm = step % 2 ? 0.05 : 0.0;
        const bool applied = optim::amp_step(*eager.master, eager.scaler, *eager.opt, grads, ao);
        optim::DeviceAmpStepOptions dao;
        dao.clip = step % 2 ? &clipper : nullptr;
        int reduced = 0;
        dao.found_inf_reduce = [&](Tensor& flag) {
          ++reduced;
          CHECK(flag.numel() == 1);
        };
        const int64_t skipped_before = dev.scaler.skipped_steps();
        optim::amp_step_device(*dev.master, dev.scaler, *dev.opt, grads, dao);
        CHECK(reduced == 1);
        CHECK((dev.scaler.skipped_steps() == skipped_before) == applied);
        CHECK(dev.scaler.scale() == eager.scaler.scale());
        for (size_t i = 0; i < eager.params.size(); ++i)
          CHECK(dev.params[i].second.to_vector() == eager.params[i].second.to_vector());
        const optim::NamedTensors se = eager.opt->state(), sd = dev.opt->state();
        REQUIRE(se.size() == sd.size());
        for (size_t i = 0; i < se.size(); ++i) CHECK(sd[i].second.to_vector_f64() == se[i].second.to_vector_f64());
        const auto me = eager.master->state_slices(), md = dev.master->state_slices();
        for (size_t i = 0; i < me.size(); ++i) CHECK(md[i].value.to_vector() == me[i].value.to_vector());
      }
      CHECK(eager.scaler.skipped_steps() == 3);
      CHECK(dev.scaler.skipped_steps() == 3);
      CHECK(clipper.norm().item() > 0.05);  // the clip applied: the norms are far above 0.05
    }
  }
}

TEST_CASE("amp_step_device refuses a host-mode scaler") {
  Tensor w = ops::cast_raw(Tensor::from_vector({1.0f, 2.0f}, {2}), DType::F16);
  optim::MasterWeights mw(optim::segments_from_parameters({{"w", w}}));
  auto opt = optim::make_optimizer("sgd", mw.master_segments(), 1, {});
  optim::LossScaler host;
  CHECK_THROWS_AS(optim::amp_step_device(mw, host, *opt, {Tensor::ones({2}, DType::F16)}), Error);
}
