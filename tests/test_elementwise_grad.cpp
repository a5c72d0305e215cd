// tests/test_elementwise_grad.cpp: finite-difference checks of the elementwise ops in f64.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

TEST_CASE("add/sub/mul with and without trailing broadcast") {
  for (auto op : {ops::add, ops::sub, ops::mul}) {
    auto f = [&](const std::vector<Tensor>& in) { return op(in[0], in[1]); };
    CHECK(gradcheck(f, {rand_f64({2, 3, 4}, 1), rand_f64({2, 3, 4}, 2)}) == "");
    CHECK(gradcheck(f, {rand_f64({2, 3, 4}, 3), rand_f64({4}, 4)}) == "");
    CHECK(gradcheck(f, {rand_f64({2, 3, 4}, 5), rand_f64({3, 4}, 6)}) == "");
  }
}

TEST_CASE("mul with only the broadcast operand requiring a gradient") {
  // A constant full-shape a and a [4] parameter b: db is a summed over the leading dims.
  Tensor a = rand_f64({2, 3, 4}, 7, -1, 1, false), b = rand_f64({4}, 8, -1, 1, true);
  ops::sum(ops::mul(a, b)).backward();
  REQUIRE(b.grad().defined());
  const std::vector<double> av = a.to_vector_f64(), gb = b.grad().to_vector_f64();
  for (int j = 0; j < 4; ++j) {
    double want = 0;
    for (int i = 0; i < 6; ++i) want += av[i * 4 + j];
    CHECK(gb[j] == doctest::Approx(want).epsilon(1e-12));
  }
  auto f = [&](const std::vector<Tensor>& in) { return ops::mul(a, in[0]); };
  CHECK(gradcheck(f, {rand_f64({4}, 9)}) == "");
}

TEST_CASE("scale, add_scalar, axpby, square") {
  CHECK(gradcheck([](auto& in) { return ops::scale(in[0], -1.5f); }, {rand_f64({7}, 1)}) == "");
  CHECK(gradcheck([](auto& in) { return ops::add_scalar(in[0], 0.25f); }, {rand_f64({7}, 2)}) == "");
  CHECK(gradcheck([](auto& in) { return ops::axpby(in[0], in[1], 0.5f, -2.0f); }, {rand_f64({5}, 3), rand_f64({5}, 4)}) == "");
  CHECK(gradcheck([](auto& in) { return ops::square(in[0]); }, {rand_f64({6}, 5)}) == "");
}

namespace {
// 40 values with |x| in [0.05, 1], every `stride`-th one negated: finite differences straddling
// ReLU's kink at 0 are meaningless, so inputs stay away from it.
Tensor away_from_kink(uint64_t seed, size_t stride) {
  std::vector<double> v = rand_f64({40}, seed, 0.05, 1.0, false).to_vector_f64();
  for (size_t i = 0; i < v.size(); i += stride) v[i] = -v[i];
  Tensor x = Tensor::from_vector_f64(v, {40});
  x.set_requires_grad(true);
  return x;
}
}  // namespace

TEST_CASE("relu away from the kink, gelu everywhere") {
  CHECK(gradcheck([](auto& in) { return ops::relu(in[0]); }, {away_from_kink(7, 2)}) == "");
  CHECK(gradcheck([](auto& in) { return ops::gelu(in[0]); }, {rand_f64({40}, 8, -3, 3)}) == "");
}

TEST_CASE("relu_ (in place) matches relu: values and gradients; a grad leaf is refused") {
  Tensor xr = away_from_kink(11, 3);
  // relu_ needs a non-leaf: scale by 1 gives one without changing the values.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor t = ops::scale(in[0], 1.0f);
    ops::relu_(t);
    return t;
  };
  CHECK(gradcheck(f, {xr}) == "");
  Tensor t = ops::scale(xr, 1.0f);
  ops::relu_(t);
  CHECK(t.to_vector_f64() == ops::relu(xr).to_vector_f64());
  CHECK(t.grad_fn() != nullptr);
  CHECK_THROWS_WITH_AS(ops::relu_(xr), doctest::Contains("leaf"), Error);
  Tensor plain = Tensor::from_vector_f64({-1.0, 2.0}, {2});  // no grad: just overwritten
  ops::relu_(plain);
  CHECK(plain.to_vector_f64() == std::vector<double>{0.0, 2.0});
}

TEST_CASE("cast is differentiable") {
  CHECK(gradcheck([](auto& in) { return ops::cast(ops::scale(ops::cast(in[0], DType::F32), 2.0f), DType::F64); },
                  {rand_f64({5}, 9)}, {1e-3, 1e-5, 1e-4}) == "");
}
