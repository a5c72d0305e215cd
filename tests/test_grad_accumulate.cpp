// tests/test_grad_accumulate.cpp: autograd's "accumulate into the pending gradient" contract
// (core/autograd.h, pending_gradient; BackendConfig::fused_grad_accumulation) on the CPU:
//  - a conv whose input also feeds a shortcut adds its dx into the pending gradient: the engine's
//    bits exactly, and the engine's own add (gradient_sums) does not run;
//  - a pending gradient that someone else still holds is never offered (it would be overwritten
//    under them);
//  - leaves: grad-ready hooks fire once with the complete sum; gradient accumulation across
//    micro-steps and mark_grad_zero give the same .grad as with the contract off;
//  - a whole ResNet (resnet_tiny) backward sums no two gradients with a separate add, and every
//    parameter gradient has the bits it has with the contract off.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <utility>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/models/resnet.h"
#include "tests/support/gradcheck.h"

using namespace tandem;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector_f64(), y = b.to_vector_f64();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// The contract on or off for one scope.
struct Accumulate {
  BackendScope scope;
  explicit Accumulate(bool on) : scope(&BackendConfig::fused_grad_accumulation, on) {}
};

ops::Conv2dParams same_padding() {
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  return p;
}

struct Grads {
  Tensor dx, dw;
  uint64_t sums = 0;     // the engine's adds during the backward
  int64_t conv_adds = 0;  // dgrads added into a pending gradient (ops::conv_dgrad_accumulate_stats)
};

// h = 1.5 x feeds a 3x3 conv (recorded first, as a block's first conv before its shortcut; argument
// order is unspecified, hence the separate statement) and other(h); y = conv(h) + other(h),
// loss = sum(y * up). h's two gradients meet: other's arrives first, the conv's dx second.
Grads conv_and(DType dt, bool on, const std::function<Tensor(const Tensor&)>& other) {
  Accumulate acc(on);
  Tensor x = testing::rand_f64({2, 5, 5, 3}, 1, -1, 1, false).to(dt).set_requires_grad(true);
  Tensor w = testing::rand_f64({3, 3, 3, 3}, 2, -1, 1, false).to(dt).set_requires_grad(true);
  Tensor up = testing::rand_f64({2, 5, 5, 3}, 3, -1, 1, false).to(dt);
  Tensor h = ops::scale(x, 1.5f);
  Tensor branch = ops::conv2d(h, w, Tensor(), same_padding());
  Tensor y = ops::add(branch, other(h));
  const uint64_t before = autograd::gradient_sums();
  const int64_t adds = ops::conv_dgrad_accumulate_stats().added;
  ops::sum(ops::mul(y, up)).backward();
  return {x.grad(), w.grad(), autograd::gradient_sums() - before, ops::conv_dgrad_accumulate_stats().added - adds};
}

}  // namespace

TEST_CASE("a conv whose input also feeds a shortcut adds into the pending gradient: the engine's bits, no engine add") {
  auto shortcut = [](const Tensor& h) { return ops::scale(h, 0.5f); };
  for (DType dt : {DType::F64, DType::F32}) {
    INFO(dtype_name(dt));
    const Grads on = conv_and(dt, true, shortcut), off = conv_and(dt, false, shortcut);
    CHECK(off.sums == 1);  // the engine summed h's two gradients
    CHECK(off.conv_adds == 0);
    CHECK(on.sums == 0);  // the conv's backward did, in place
    CHECK(on.conv_adds == 1);
    CHECK(same_bits(on.dx, off.dx));
    CHECK(same_bits(on.dw, off.dw));
  }
  // And the values are right: the whole thing by finite differences, with the contract on.
  Accumulate acc(true);
  auto f = [](const std::vector<Tensor>& in) {
    Tensor h = ops::scale(in[0], 1.5f);
    Tensor branch = ops::conv2d(h, in[1], Tensor(), same_padding());
    return ops::add(branch, ops::scale(h, 0.5f));
  };
  CHECK(testing::gradcheck(f, {testing::rand_f64({1, 4, 4, 2}, 4), testing::rand_f64({2, 3, 3, 2}, 5)}) == "");
}

TEST_CASE("a pending gradient that is someone else's too is not offered; one the engine summed itself is") {
  // conv(h) + h: AddBackward returns its incoming gradient itself for both inputs, so the conv's dy
  // and h's pending gradient are one tensor. Adding dx into it would change dy under the conv's own
  // weight gradient (computed after dx): dw would be wrong. The engine must see the second holder.
  // conv(h) + h * h: MulBackward's two edges into h are summed by the engine (a fresh tensor only the
  // engine holds), and the conv may then add into that sum.
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> other;
    int64_t conv_adds;    // with the contract on
    uint64_t sums_off;    // the engine's adds with it off (on: one fewer per conv add)
  };
  const Case cases[] = {{"h", [](const Tensor& h) { return h; }, 0, 1},
                        {"h * h", [](const Tensor& h) { return ops::mul(h, h); }, 1, 2}};
  for (const Case& c : cases) {
    INFO("conv(h) + ", c.name);
    const Grads on = conv_and(DType::F64, true, c.other), off = conv_and(DType::F64, false, c.other);
    CHECK(on.conv_adds == c.conv_adds);
    CHECK(off.sums == c.sums_off);
    CHECK(on.sums == c.sums_off - static_cast<uint64_t>(c.conv_adds));
    CHECK(same_bits(on.dx, off.dx));
    CHECK(same_bits(on.dw, off.dw));
  }
}

TEST_CASE("a leaf feeding a conv and a shortcut: one grad-ready hook with the sum; micro-steps accumulate as before") {
  // The pending buffer is the engine's, never .grad: the hook (DDP's bucket entry point) fires once,
  // after both contributions, and a second backward (gradient accumulation) adds to .grad.
  auto run = [](bool on, int micro_steps, bool zero_first) {
    Accumulate acc(on);
    Tensor x = testing::rand_f64({2, 4, 4, 3}, 31, -1, 1, false).to(DType::F32).set_requires_grad(true);
    Tensor w = testing::rand_f64({3, 3, 3, 3}, 32, -1, 1, false).to(DType::F32).set_requires_grad(true);
    if (zero_first) {  // what dist::Reducer::zero_grad does before the step
      x.set_grad(Tensor::zeros(x.shape()));
      autograd::mark_grad_zero(x);
    }
    int fired = 0;
    std::vector<float> seen;
    GradReadyHookHandle hook = x.register_grad_ready_hook([&](Tensor& p) {
      ++fired;
      seen = p.grad().to_vector();
    });
    uint64_t sums = 0;
    for (int s = 0; s < micro_steps; ++s) {
      Tensor up = testing::rand_f64({2, 4, 4, 3}, 33 + s, -1, 1, false).to(DType::F32);
      Tensor branch = ops::conv2d(x, w, Tensor(), same_padding());  // recorded before the shortcut
      Tensor y = ops::add(branch, ops::scale(x, 0.5f));
      const uint64_t before = autograd::gradient_sums();
      ops::sum(ops::mul(y, up)).backward();
      sums += autograd::gradient_sums() - before;
    }
    CHECK(fired == micro_steps);
    CHECK(seen == x.grad().to_vector());  // the last hook saw the complete gradient
    return std::make_pair(x.grad(), sums);
  };
  for (bool zero_first : {false, true})
    for (int steps : {1, 2}) {
      INFO("micro-steps ", steps, zero_first ? ", .grad zeroed first" : "");
      auto [g_on, sums_on] = run(true, steps, zero_first);
      auto [g_off, sums_off] = run(false, steps, zero_first);
      CHECK(same_bits(g_on, g_off));
      CHECK(sums_on == 0);
      CHECK(sums_off == static_cast<uint64_t>(steps));
    }
}

TEST_CASE("ResNet (resnet_tiny, training): backward sums no gradients with a separate add; same bits as without") {
  // Every block's input feeds its first conv and its shortcut (identity, or the downsample conv):
  // four meetings in resnet_tiny's four blocks, each summed by the engine with the contract off and
  // by the later conv's dgrad with it on.
  auto run = [](bool on) {
    Accumulate acc(on);
    models::ResNet net(models::resnet_tiny_config(10), 7);
    net.train(true);
    Generator g(8);
    Tensor x = randn({2, 32, 32, 3}, g);
    Tensor y = net(x);
    Tensor up = randn(y.shape(), g);  // not mul(y, y): its two edges into y would be a sum of their own
    const uint64_t before = autograd::gradient_sums();
    ops::sum(ops::mul(y, up)).backward();
    std::vector<Tensor> grads;
    for (auto& [_, p] : net.named_parameters()) grads.push_back(p.grad());
    return std::make_pair(grads, autograd::gradient_sums() - before);
  };
  auto [on, sums_on] = run(true);
  auto [off, sums_off] = run(false);
  CHECK(sums_off == 4);
  CHECK(sums_on == 0);
  REQUIRE(on.size() == off.size());
  size_t differ = 0;
  for (size_t i = 0; i < on.size(); ++i) differ += !same_bits(on[i], off[i]);
  CHECK_MESSAGE(differ == 0, differ, " of ", on.size(), " parameter gradients differ in their bits");
}
