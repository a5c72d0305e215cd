// tests/test_autograd.cpp: the engine's contracts - reuse, shared subgraphs, no_grad, hooks, freeing.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"

using namespace tandem;

static Tensor leaf(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

TEST_CASE("a tensor used twice accumulates both contributions") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = ops::mul(x, x);  // dy/dx = 2x
  y.backward(Tensor::ones({3}));
  CHECK(x.grad().to_vector() == std::vector<float>{2, 4, 6});
}

TEST_CASE("shared subgraph: gradient flows through both branches once") {
  Tensor x = leaf({1, -2, 3});
  Tensor h = ops::scale(x, 3.0f);             // shared
  Tensor a = ops::relu(h);                    // branch 1
  Tensor b = ops::mul(h, h);                  // branch 2
  Tensor y = ops::add(a, b);
  y.backward(Tensor::ones({3}));
  // dy/dx = 3 * (1[h>0] + 2h)
  std::vector<float> expect{3 * (1 + 6), 3 * (0 - 12), 3 * (1 + 18)};
  CHECK(x.grad().to_vector() == expect);
}

TEST_CASE("gradients accumulate across backward calls and into an existing .grad buffer in place") {
  Tensor x = leaf({1, 2});
  Tensor buf = Tensor::zeros({2});
  x.set_grad(buf);
  ops::scale(x, 2.0f).backward(Tensor::ones({2}));
  ops::scale(x, 2.0f).backward(Tensor::ones({2}));
  CHECK(buf.to_vector() == std::vector<float>{4, 4});  // same storage: a bucket view would see it
  CHECK(x.grad().shares_storage(buf));
}

TEST_CASE("no_grad records nothing") {
  Tensor x = leaf({1, 2});
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = ops::mul(x, x);
  }
  CHECK_FALSE(y.requires_grad());
  CHECK(y.grad_fn() == nullptr);
  CHECK_THROWS_AS(y.backward(Tensor::ones({2})), Error);
}

TEST_CASE("grad-ready hook fires once per parameter per backward, after the gradient is complete") {
  Tensor w = leaf({1, 2, 3});
  Tensor v = leaf({4, 5, 6});
  int fired_w = 0, fired_v = 0;
  std::vector<float> seen;
  GradReadyHookHandle hw = w.register_grad_ready_hook([&](Tensor& p) {
    ++fired_w;
    seen = p.grad().to_vector();
  });
  GradReadyHookHandle hv = v.register_grad_ready_hook([&](Tensor&) { ++fired_v; });
  // w used three times: the hook must see the sum of all three contributions.
  Tensor y = ops::add(ops::add(ops::mul(w, v), w), ops::scale(w, 2.0f));
  y.backward(Tensor::ones({3}));
  CHECK(fired_w == 1);
  CHECK(fired_v == 1);
  CHECK(seen == std::vector<float>{4 + 1 + 2, 5 + 1 + 2, 6 + 1 + 2});
  ops::mul(w, w).backward(Tensor::ones({3}));
  CHECK(fired_w == 2);
  CHECK(fired_v == 1);  // v did not take part in the second backward
}

TEST_CASE("a hook handle removes exactly its own hook, and is safe after its leaf died") {
  Tensor w = leaf({1, 2});
  int a = 0, b = 0;
  GradReadyHookHandle ha = w.register_grad_ready_hook([&](Tensor&) { ++a; });
  {
    GradReadyHookHandle hb = w.register_grad_ready_hook([&](Tensor&) { ++b; });
    CHECK(w.num_grad_ready_hooks() == 2);
    GradReadyHookHandle moved = std::move(hb);  // the moved-from handle removes nothing
    CHECK(w.num_grad_ready_hooks() == 2);
    ops::scale(w, 2.0f).backward(Tensor::ones({2}));
  }
  CHECK(w.num_grad_ready_hooks() == 1);
  ops::scale(w, 2.0f).backward(Tensor::ones({2}));
  CHECK(a == 2);
  CHECK(b == 1);  // removed with its handle: it did not fire in the second backward
  ha.reset();
  CHECK(w.num_grad_ready_hooks() == 0);
  GradReadyHookHandle outlives;
  {
    Tensor gone = leaf({3});
    outlives = gone.register_grad_ready_hook([](Tensor&) {});
  }
  outlives.reset();  // the leaf is gone: nothing to remove, no crash
}

TEST_CASE("backward callbacks run after the last node") {
  Tensor w = leaf({1});
  bool hook_ran = false, cb_after_hook = false;
  GradReadyHookHandle h = w.register_grad_ready_hook([&](Tensor&) {
    hook_ran = true;
    autograd::queue_callback([&] { cb_after_hook = hook_ran; });
  });
  ops::scale(w, 2.0f).backward(Tensor::ones({1}));
  CHECK(cb_after_hook);
}

TEST_CASE("saved tensors are freed by backward: a second backward through the graph fails clearly") {
  Tensor x = leaf({1, 2});
  Tensor y = ops::mul(x, x);
  y.backward(Tensor::ones({2}));
  CHECK_THROWS_WITH_AS(y.backward(Tensor::ones({2})), doctest::Contains("second time"), Error);
}

TEST_CASE("views share storage and reject shape mismatches") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor s = t.slice(1, 3);
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.to_vector() == std::vector<float>{2, 3, 4, 5});
  s.fill_(7);
  CHECK(t.to_vector() == std::vector<float>{0, 1, 7, 7, 7, 7});
  CHECK(t.view({-1}).shape() == Shape{6});
  CHECK_THROWS_AS(t.view({4}), Error);
  CHECK_THROWS_AS(t.slice(2, 4), Error);
}

TEST_CASE("16-bit casts round to nearest even and survive a round trip") {
  Tensor x = Tensor::from_vector({1.0f, 1.00390625f, 65504.f, -2.5e-8f, 3.14159f}, {5});
  std::vector<float> bf = ops::cast_raw(ops::cast_raw(x, DType::BF16), DType::F32).to_vector();
  CHECK(bf[0] == 1.0f);
  CHECK(bf[1] == 1.0f);  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even wins
  std::vector<float> hf = ops::cast_raw(ops::cast_raw(x, DType::F16), DType::F32).to_vector();
  CHECK(hf[2] == 65504.f);
  CHECK(hf[3] == doctest::Approx(-2.98e-8).epsilon(0.01));  // nearest subnormal is 2^-25 * 1 rounds to 2^-24
  CHECK(hf[4] == doctest::Approx(3.140625));
}

TEST_CASE("seeded random init is reproducible and independent of device order") {
  Generator g1(42), g2(42);
  Tensor a = randn({1000}, g1);
  Tensor b = randn({1000}, g2);
  CHECK(a.to_vector() == b.to_vector());
  double mean = 0, var = 0;
  for (float v : a.to_vector()) mean += v;
  mean /= 1000;
  for (float v : a.to_vector()) var += (v - mean) * (v - mean);
  var /= 1000;
  CHECK(std::abs(mean) < 0.1);
  CHECK(var == doctest::Approx(1.0).epsilon(0.1));
}

TEST_CASE("mark_grad_zero: the next accumulation copies (overwrites), once; a replaced .grad is not vouched for") {
  // The flag is a promise by the caller; breaking it on purpose (5s in a "zeroed" .grad) shows
  // that the accumulation really copies instead of adding.
  Tensor x = leaf({1, 2, 3});
  Tensor buffer = Tensor::full({3}, 5.0);
  x.set_grad(buffer.view({3}));
  autograd::mark_grad_zero(x);
  const uint64_t copies = autograd::zero_grad_copies();
  ops::scale(x, 2.0f).backward(Tensor::ones({3}));
  CHECK(x.grad().to_vector() == std::vector<float>{2, 2, 2});  // copied over the 5s
  CHECK(buffer.to_vector() == std::vector<float>{2, 2, 2});    // in place: still a view of buffer
  CHECK(autograd::zero_grad_copies() == copies + 1);
  ops::scale(x, 2.0f).backward(Tensor::ones({3}));  // the flag was spent: adds
  CHECK(x.grad().to_vector() == std::vector<float>{4, 4, 4});
  autograd::mark_grad_zero(x);
  x.set_grad(Tensor::full({3}, 1.0));  // another .grad than the one vouched for: adds
  ops::scale(x, 2.0f).backward(Tensor::ones({3}));
  CHECK(x.grad().to_vector() == std::vector<float>{3, 3, 3});
  CHECK(autograd::zero_grad_copies() == copies + 1);
  Tensor y = leaf({1});  // no .grad yet: nothing to vouch for, the first gradient is cloned as before
  autograd::mark_grad_zero(y);
  ops::scale(y, 2.0f).backward(Tensor::ones({1}));
  CHECK(y.grad().to_vector() == std::vector<float>{2});
}
