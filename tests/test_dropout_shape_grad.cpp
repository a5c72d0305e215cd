// tests/test_dropout_shape_grad.cpp: dropout (mask statistics, scaling, replay, gradcheck) and the
// shape ops reshape, flatten, concat_channels and transpose12 (values and gradchecks).
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

TEST_CASE("dropout in eval mode or with p = 0 is the identity") {
  Tensor x = rand_f64({3, 4}, 1);
  Generator g(5);
  CHECK(ops::dropout(x, 0.5f, false, g).to_vector_f64() == x.to_vector_f64());
  CHECK(ops::dropout(x, 0.0f, true, g).to_vector_f64() == x.to_vector_f64());
  CHECK(g.offset() == 0);  // no randomness consumed
  CHECK(gradcheck([&](auto& in) { return ops::dropout(in[0], 0.5f, false, g); }, {x}) == "");
}

TEST_CASE("dropout drops about p of the elements and scales the rest by 1 / (1 - p)") {
  const float p = 0.3f;
  const int64_t n = 20000;
  Tensor x = rand_f64({n}, 2, 0.5, 1.5, false);  // never zero, so a zero output means dropped
  Generator g(17);
  std::vector<double> xv = x.to_vector_f64(), yv = ops::dropout(x, p, true, g).to_vector_f64();
  CHECK(g.offset() == static_cast<uint64_t>(n));  // the generator advanced by numel
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv[i] == 0.0) {
      ++dropped;
    } else {
      CHECK(yv[i] == doctest::Approx(xv[i] / (1.0 - p)).epsilon(1e-7));  // p is a float
    }
  }
  // Binomial std is sqrt(p (1 - p) / n) ~ 0.0032: 0.02 is over 6 sigma.
  CHECK(std::fabs(static_cast<double>(dropped) / n - p) < 0.02);
}

TEST_CASE("dropout replays its mask from the generator state and never repeats it") {
  Tensor x = rand_f64({64}, 3, 0.5, 1.5, false);
  Generator g(9);
  std::vector<double> a = ops::dropout(x, 0.5f, true, g).to_vector_f64();
  std::vector<double> b = ops::dropout(x, 0.5f, true, g).to_vector_f64();
  CHECK(a != b);  // the second call drew fresh counters
  g.set_state(9, 0);
  CHECK(ops::dropout(x, 0.5f, true, g).to_vector_f64() == a);
  Generator other(10);
  CHECK(ops::dropout(x, 0.5f, true, other).to_vector_f64() != a);
}

TEST_CASE("dropout gradcheck in training mode with a fixed generator state") {
  Generator g(21);
  auto f = [&](const std::vector<Tensor>& in) {
    g.set_state(21, 100);  // every probe sees the same mask
    return ops::dropout(in[0], 0.4f, true, g);
  };
  CHECK(gradcheck(f, {rand_f64({5, 6}, 4)}) == "");
  // The gradient is the mask times 1 / (1 - p): zero exactly where the output was dropped.
  Tensor x = rand_f64({5, 6}, 5, 0.5, 1.5);
  Tensor y = f({x});
  y.backward(Tensor::ones({5, 6}, DType::F64));
  std::vector<double> yv = y.to_vector_f64(), gv = x.grad().to_vector_f64();
  for (size_t i = 0; i < yv.size(); ++i) CHECK(gv[i] == doctest::Approx(yv[i] == 0 ? 0.0 : 1.0 / (1.0 - 0.4f)));
}

TEST_CASE("dropout edge cases") {
  Tensor x = rand_f64({10}, 6, 0.5, 1.5, false);
  Generator g(1);
  CHECK(ops::dropout(x, 1.0f, true, g).to_vector_f64() == std::vector<double>(10, 0.0));
  CHECK_THROWS_AS(ops::dropout(x, 1.5f, true, g), Error);
  CHECK_THROWS_AS(ops::dropout(x, -0.1f, true, g), Error);
}

TEST_CASE("reshape and flatten are differentiable views") {
  Tensor x = rand_f64({2, 3, 4}, 7);
  Tensor y = ops::reshape(x, {4, -1});
  CHECK(y.shape() == Shape{4, 6});
  CHECK(y.shares_storage(x));
  CHECK(ops::flatten(x).shape() == Shape{2, 12});
  CHECK(gradcheck([](auto& in) { return ops::square(ops::reshape(in[0], {6, 4})); }, {x}) == "");
  CHECK(gradcheck([](auto& in) { return ops::square(ops::flatten(in[0])); }, {x}) == "");
  CHECK_THROWS_AS(ops::reshape(x, {5, -1}), Error);
}

TEST_CASE("concat_channels joins along the last dim") {
  Tensor a = rand_f64({2, 2, 3, 1}, 8), b = rand_f64({2, 2, 3, 3}, 9), c = rand_f64({2, 2, 3, 2}, 10, -1, 1, false);
  Tensor y = ops::concat_channels({a, b, c});
  CHECK(y.shape() == Shape{2, 2, 3, 6});
  std::vector<double> av = a.to_vector_f64(), bv = b.to_vector_f64(), cv = c.to_vector_f64(), yv = y.to_vector_f64();
  for (int64_t r = 0; r < 12; ++r) {
    CHECK(yv[r * 6 + 0] == av[r]);
    for (int j = 0; j < 3; ++j) CHECK(yv[r * 6 + 1 + j] == bv[r * 3 + j]);
    for (int j = 0; j < 2; ++j) CHECK(yv[r * 6 + 4 + j] == cv[r * 2 + j]);
  }
  // c needs no gradient: only a and b are probed, and c's slot must not disturb them.
  CHECK(gradcheck([](auto& in) { return ops::concat_channels({in[0], in[1], in[2]}); }, {a, b, c}) == "");
  CHECK(gradcheck([](auto& in) { return ops::concat_channels({in[0], in[1]}); }, {rand_f64({3, 2}, 11), rand_f64({3, 4}, 12)}) == "");
  CHECK_THROWS_AS(ops::concat_channels({rand_f64({2, 3}, 1), rand_f64({3, 3}, 2)}), Error);
}

TEST_CASE("transpose12 swaps dims 1 and 2 and is its own inverse") {
  Tensor x = rand_f64({2, 3, 4, 5}, 13);
  Tensor y = ops::transpose12(x);
  CHECK(y.shape() == Shape{2, 4, 3, 5});
  std::vector<double> xv = x.to_vector_f64(), yv = y.to_vector_f64();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d) CHECK(yv[((a * 4 + c) * 3 + b) * 5 + d] == xv[((a * 3 + b) * 4 + c) * 5 + d]);
  CHECK(ops::transpose12(y).to_vector_f64() == xv);
  CHECK(gradcheck([](auto& in) { return ops::transpose12(in[0]); }, {x}) == "");
  // Integer tensors move too (attention masks, indices).
  Tensor i = Tensor::from_vector_i64({0, 1, 2, 3, 4, 5}, {1, 2, 3, 1});
  CHECK(ops::transpose12(i).to_vector_i64() == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
}
