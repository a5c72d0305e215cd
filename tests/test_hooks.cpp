// tests/test_hooks.cpp: the hooks ZeRO-3 hangs on (dist/zero3.h) - Module's forward pre-/post-hooks,
// autograd's pre-backward hook, their owned handles - and Storage::release/reacquire, which frees a
// gathered parameter while views of it live on.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/storage.h"
#include "layers/layers.h"

using namespace tandem;

namespace {

// y = fc2(relu(fc1(x))), and a typed forward with a second input that is called through call().
struct Two : Module {
  Child<Linear> fc1, fc2;
  Two() {
    Generator g(3);
    fc1 = register_module("fc1", std::make_shared<Linear>(4, 4, true, &g));
    fc2 = register_module("fc2", std::make_shared<Linear>(4, 2, true, &g));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(ops::relu((*fc1)(x))); }
  Tensor forward(const Tensor& x, float gain) { return ops::scale(forward(x), gain); }
  std::string type_name() const override { return "Two"; }
};

}  // namespace

TEST_CASE("forward hooks run around operator() and call(), in order, with the output; handles remove them") {
  auto m = std::make_shared<Two>();
  std::vector<std::string> log;
  Tensor seen;
  auto pre = m->register_forward_pre_hook([&](Module& mod) { log.push_back("pre " + mod.type_name()); });
  auto post = m->register_forward_hook([&](Module& mod, const Tensor& y) {
    log.push_back("post " + mod.type_name());
    seen = y;
  });
  auto inner = m->fc1->register_forward_pre_hook([&](Module& mod) { log.push_back("pre " + mod.name()); });
  const Tensor x = Tensor::ones({3, 4});
  const Tensor y = (*m)(x);
  CHECK(log == std::vector<std::string>{"pre Two", "pre fc1", "post Two"});
  CHECK(seen.shares_storage(y));  // the post-hook got the output itself
  log.clear();
  const Tensor z = m->call([&] { return m->forward(x, 2.0f); });  // a typed forward, hooked by its caller
  CHECK(log == std::vector<std::string>{"pre Two", "pre fc1", "post Two"});
  CHECK(seen.shares_storage(z));
  log.clear();
  m->forward(x, 2.0f);  // called directly: only the children run through their hooks
  CHECK(log == std::vector<std::string>{"pre fc1"});
  log.clear();
  pre.reset();
  inner = autograd::HookHandle();  // move-assigning drops the hook it held
  (*m)(x);
  CHECK(log == std::vector<std::string>{"post Two"});
  {
    auto gone = std::make_shared<Two>();
    autograd::HookHandle outlives = gone->register_forward_pre_hook([&](Module&) { log.push_back("never"); });
    gone.reset();
  }  // a handle that outlives its module does nothing when it goes
  CHECK(log == std::vector<std::string>{"post Two"});
}

TEST_CASE("a hook that removes itself while running is not run again") {
  Linear lin(2, 2);
  int runs = 0;
  autograd::HookHandle self;
  self = lin.register_forward_pre_hook([&](Module&) {
    ++runs;
    self.reset();
  });
  lin(Tensor::ones({1, 2}));
  lin(Tensor::ones({1, 2}));
  CHECK(runs == 1);
}

TEST_CASE("a pre-backward hook runs once per backward, after the nodes downstream of its tensor and before its own") {
  Generator g(5);
  Tensor w = randn({4, 4}, g);
  w.set_requires_grad(true);
  Tensor x = randn({2, 4}, g);
  std::vector<std::string> log;
  for (int pass = 0; pass < 2; ++pass) {
    log.clear();
    Tensor h = ops::linear(x, w);  // its backward computes w's gradient
    Tensor y = ops::relu(h);
    auto on_h = autograd::register_pre_backward_hook(h, [&] {
      // relu's backward (downstream of h) has run, linear's (which produced h) has not.
      log.push_back(w.grad().defined() ? "late" : "before linear");
    });
    auto on_y = autograd::register_pre_backward_hook(y, [&] { log.push_back("before relu"); });
    auto dropped = autograd::register_pre_backward_hook(y, [&] { log.push_back("dropped"); });
    dropped.reset();
    ops::sum(y).backward();
    CHECK(log == std::vector<std::string>{"before relu", "before linear"});
    w.set_grad(Tensor());
  }
  Tensor leaf_only = Tensor::ones({2});
  leaf_only.set_requires_grad(true);
  CHECK_THROWS_WITH_AS(autograd::register_pre_backward_hook(leaf_only, [] {}), doctest::Contains("no grad_fn"),
                       Error);
}

TEST_CASE("Storage::release frees the bytes under live views; reacquire gives them back to the same views") {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  Tensor t = Tensor::full({1024}, 3.0);
  Tensor view = t.slice(512, 1024);  // another TensorImpl over the same Storage (what autograd saves)
  CHECK(memory_stats(Device::cpu()).current_bytes == before + 4096);
  t.storage()->release();
  CHECK_FALSE(view.storage()->resident());
  CHECK(view.storage()->data() == nullptr);  // nothing behind it
  CHECK(memory_stats(Device::cpu()).current_bytes == before);
  t.storage()->release();  // twice: nothing more to free
  CHECK(memory_stats(Device::cpu()).current_bytes == before);
  t.storage()->reacquire();
  CHECK(view.storage()->resident());
  CHECK(memory_stats(Device::cpu()).current_bytes == before + 4096);
  view.fill_(7.0);  // the view writes into the new bytes, which t reads
  CHECK(t.to_vector()[1023] == 7.0f);
  t = Tensor(), view = Tensor();
  CHECK(memory_stats(Device::cpu()).current_bytes == before);  // and the destructor frees them once
}
