// tests/mpi_sync_batchnorm.cpp: N ranks x batch b through SyncBatchNorm == one process running
// plain BatchNorm2d on the concatenated batch N*b.
//
// Every rank builds the whole batch (same seed) and computes the one-process reference itself.
// The inputs depend on the rank: rank r's slice is shifted by 0.5 r and scaled by 1 + 0.25 r, so
// per-rank statistics differ from the global ones and a layer that only normalised locally fails.
// Checked: the output slice, the input-gradient slice, weight/bias gradients SUMMED over ranks
// (each rank's are its local sums; the loss is sum(y * G), so the sum over ranks is the full
// batch's), running mean/var, and (second case) whole training steps through DDP with
// sync_batchnorm, where DDP AVERAGES the gradients of per-rank mean losses.
// Tolerances: f32 1e-5 relative (floor 1e-3): the two sides sum the same values in a different
// order (per-rank partial sums, all-reduce) and the variance is E[x^2] - mean^2 here vs a two-pass
// variance in the reference (a few ulps; |mean| / std stays below 2). f64 1e-10: the same, at f64.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "core/random.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "dist/extras/sync_batchnorm.h"

using namespace tandem;
using namespace tandem::dist;

namespace {
constexpr int64_t kB = 3, kH = 2, kW = 2, kC = 4;  // per-rank batch and image shape

// The full batch [N*b, ...]: rank r's rows shifted by 0.5 r and scaled by 1 + 0.25 r.
Tensor rank_dependent(const Shape& s, uint64_t seed, DType dt) {
  Generator g(seed);
  std::vector<double> v = randn(s, g).to_vector_f64();
  const size_t per_rank = v.size() / world().size;
  for (size_t i = 0; i < v.size(); ++i) {
    const double r = static_cast<double>(i / per_rank);
    v[i] = v[i] * (1 + 0.25 * r) + 0.5 * r;
  }
  return Tensor::from_vector_f64(v, s, dt);
}

// max |a - b| / max(|b|, floor) over all elements.
double max_rel(const Tensor& a, const Tensor& b, double floor = 1e-3) {
  std::vector<double> va = a.to_vector_f64(), vb = b.to_vector_f64();
  REQUIRE(va.size() == vb.size());
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i)
    worst = std::max(worst, std::abs(va[i] - vb[i]) / std::max(floor, std::abs(vb[i])));
  return worst;
}

Tensor my_rows(const Tensor& full) {
  const int r = world().rank;
  return full.detach().slice(r * kB, (r + 1) * kB);
}

Tensor summed_over_ranks(const Tensor& t) {
  Tensor s = t.clone();
  comm_for(s.device()).all_reduce(s)->wait();
  return s;
}
}  // namespace

TEST_CASE("SyncBatchNorm on N ranks == BatchNorm2d on the concatenated batch (f32 and f64)") {
  for (DType dt : {DType::F32, DType::F64}) {
    const std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    const double tol = dt == DType::F32 ? 1e-5 : 1e-10;
    BatchNorm2d ref(kC, 1e-5, 0.25);  // 0.25: exact as the f32 scalar the ops take
    ref.to(dt);
    Tensor w = ref.weight(), b = ref.bias();
    w.copy_(rank_dependent({kC}, 1, dt));  // same values on every rank (the seed is shared)
    b.copy_(rank_dependent({kC}, 2, dt));
    SyncBatchNorm sync(kC, dist::comm_for(Device::cpu()), 1e-5, 0.25);
    sync.to(dt);
    for (auto& [name, t] : sync.named_parameters()) t.detach().copy_(name == "weight" ? w : b);
    const Shape full{world().size * kB, kH, kW, kC};
    for (int step = 0; step < 2; ++step) {  // two steps: the running stats' momentum is exercised
      CAPTURE(step);
      Tensor x = rank_dependent(full, 10 + step, dt).set_requires_grad(true);
      Tensor upstream = rank_dependent(full, 20 + step, dt);
      for (Module* m : {static_cast<Module*>(&ref), static_cast<Module*>(&sync)}) m->zero_grad();
      Tensor y_ref = ref(x);
      ops::sum(ops::mul(y_ref, upstream)).backward();

      Tensor xs = my_rows(x).clone().set_requires_grad(true);
      Tensor y = sync(xs);
      ops::sum(ops::mul(y, my_rows(upstream))).backward();

      CHECK(max_rel(y, my_rows(y_ref)) <= tol);
      // dx = k (dy - mean(dy) - xhat mean(dy xhat)) cancels terms of size |k dy| ~ 1, so its error
      // is ulps of 1 even where dx is small: relative to max(|dx|, 0.1).
      CHECK(max_rel(xs.grad(), my_rows(x.grad()), 0.1) <= tol);
      auto sp = sync.named_parameters();
      CHECK(max_rel(summed_over_ranks(sp[0].second.grad()), ref.weight().grad()) <= tol);
      CHECK(max_rel(summed_over_ranks(sp[1].second.grad()), ref.bias().grad()) <= tol);
      auto sb = sync.named_buffers();
      CHECK(max_rel(sb[0].second, ref.running_mean()) <= tol);
      CHECK(max_rel(sb[1].second, ref.running_var()) <= tol);
      CHECK(sb[2].second.to_vector_i64()[0] == step + 1);
    }
    // Eval mode is plain batch norm with the (global) running statistics: no collective at all.
    ref.eval();
    sync.eval();
    Tensor x = rank_dependent(full, 30, dt);
    CHECK(max_rel(sync(my_rows(x)), my_rows(ref(x))) <= tol);
  }
}

TEST_CASE("SyncBatchNorm::forward_relu and forward_add_relu (fused tails) == BatchNorm2d's on the concatenated batch") {
  // The fused BN+ReLU and BN+add+ReLU would normalise with local statistics; SyncBatchNorm overrides
  // both with its synchronised BN, then (add and) ReLU. Same checks and tolerances as above, f32.
  const double tol = 1e-5;
  for (bool add : {false, true}) {
    INFO((add ? "forward_add_relu" : "forward_relu"));
    SyncBatchNorm sync(kC, dist::comm_for(Device::cpu()), 1e-5, 0.25);
    BatchNorm2d ref_copy(kC, 1e-5, 0.25);
    for (Module* m : {static_cast<Module*>(&ref_copy), static_cast<Module*>(&sync)})
      for (auto& [name, t] : m->named_parameters())
        t.detach().copy_(rank_dependent({kC}, name == "weight" ? 1 : 2, DType::F32));
    const Shape full{world().size * kB, kH, kW, kC};
    Tensor x = rank_dependent(full, 40, DType::F32).set_requires_grad(true);
    Tensor z = rank_dependent(full, 41, DType::F32).set_requires_grad(true);
    Tensor upstream = rank_dependent(full, 42, DType::F32);
    Tensor y_ref = add ? ref_copy.forward_add_relu(x, z) : ref_copy.forward_relu(x);
    ops::sum(ops::mul(y_ref, upstream)).backward();

    Tensor xs = my_rows(x).clone().set_requires_grad(true), zs = my_rows(z).clone().set_requires_grad(true);
    Tensor y = add ? sync.forward_add_relu(xs, zs) : sync.forward_relu(xs);
    ops::sum(ops::mul(y, my_rows(upstream))).backward();
    // bn(x) + z cancels O(1) terms where the sum is near 0: relative to max(|y|, 0.1), as dx above.
    CHECK(max_rel(y, my_rows(y_ref), 0.1) <= tol);
    CHECK(max_rel(xs.grad(), my_rows(x.grad()), 0.1) <= tol);
    if (add) CHECK(max_rel(zs.grad(), my_rows(z.grad())) <= tol);  // the residual's gradient is ReLU's mask times dy
    auto sp = sync.named_parameters();
    CHECK(max_rel(summed_over_ranks(sp[0].second.grad()), ref_copy.weight().grad()) <= tol);
    CHECK(max_rel(summed_over_ranks(sp[1].second.grad()), ref_copy.bias().grad()) <= tol);
    CHECK(max_rel(sync.running_mean(), ref_copy.running_mean()) <= tol);
    CHECK(max_rel(sync.running_var(), ref_copy.running_var()) <= tol);
  }
}

namespace {
// conv 3x3 (3->4) -> BatchNorm2d -> relu -> flatten -> linear (4*4*4 -> 5), built from a seed.
ModulePtr small_bn_net() {
  Generator g(42);
  auto net = std::make_shared<Sequential>();
  net->add(std::make_shared<Conv2d>(3, 4, 3, Conv2dOptions{1, 1, 1, 1, true}, &g));
  net->add(std::make_shared<BatchNorm2d>(4));
  net->add(std::make_shared<ReLU>());
  net->add(std::make_shared<Flatten>());
  net->add(std::make_shared<Linear>(64, 5, true, &g));
  return net;
}

void sgd(Module& m, float lr) {
  for (Tensor& p : m.parameters()) ops::axpby_(p, p.grad(), 1.0f, -lr);
}
}  // namespace

TEST_CASE("DDP with sync_batchnorm: N ranks x b == one process x N*b with BatchNorm2d, over 3 steps") {
  ModulePtr ref = small_bn_net();
  DdpOptions o;
  o.sync_batchnorm = true;
  o.reducer.bucketing = {256, 1024};
  DistributedDataParallel ddp(small_bn_net(), dist::comm_for(Device::cpu()), o);
  // The BatchNorm2d child was replaced in the Sequential's list: no BatchNorm2d is left anywhere.
  CHECK(ddp.module().describe().find("SyncBatchNorm(4, eps=1e-05") != std::string::npos);
  CHECK(ddp.module().describe().find("BatchNorm2d") == std::string::npos);
  const int n = world().size;
  for (int step = 0; step < 3; ++step) {
    Tensor x = rank_dependent({n * kB, 4, 4, 3}, 50 + step, DType::F32);
    Generator g(60 + step);
    Tensor y = Tensor::empty({n * kB}, DType::I64);
    randint_(y, 5, g);
    ref->zero_grad();
    ddp.module().zero_grad();
    ops::cross_entropy((*ref)(x), y).backward();
    ops::cross_entropy(ddp(my_rows(x)), my_rows(y)).backward();
    sgd(*ref, 0.1f);
    sgd(ddp.module(), 0.1f);
  }
  auto a = ddp.module().named_parameters(), b = ref->named_parameters();
  auto ab = ddp.module().named_buffers(), bb = ref->named_buffers();
  a.insert(a.end(), ab.begin(), ab.end());
  b.insert(b.end(), bb.begin(), bb.end());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);  // same names: checkpoints load either way
    if (a[i].second.dtype() == DType::I64) CHECK(a[i].second.to_vector_i64() == b[i].second.to_vector_i64());
    else CHECK(max_rel(a[i].second, b[i].second) <= 1e-5);
  }
}
