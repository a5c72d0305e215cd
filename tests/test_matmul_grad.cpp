// tests/test_matmul_grad.cpp: linear and matmul on the CPU: forward against a naive triple loop,
// and f64 finite-difference gradients (with and without bias, every transpose combination, batched).
#include <doctest/doctest.h>

#include <cmath>

#include "core/backend.h"
#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::max_abs_diff;
using testing::rand_f64;

namespace {

// Element (i, j) of op(X) for a row-major [r, c] matrix X stored at p.
double at(const std::vector<double>& v, int64_t off, int64_t cols, bool t, int64_t i, int64_t j) {
  return t ? v[off + j * cols + i] : v[off + i * cols + j];
}

// Naive reference for C = op(A) op(B), batched over `batch` entries.
std::vector<double> naive(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t batch, int64_t m, int64_t n,
                          int64_t k) {
  std::vector<double> va = a.to_vector_f64(), vb = b.to_vector_f64(), c(batch * m * n, 0.0);
  int64_t acols = ta ? m : k, bcols = tb ? k : n;
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += at(va, s * m * k, acols, ta, i, p) * at(vb, s * k * n, bcols, tb, p, j);
        c[(s * m + i) * n + j] = acc;
      }
  return c;
}

}  // namespace

TEST_CASE("matmul forward matches a naive loop for every transpose combination") {
  const int64_t B = 3, m = 4, n = 5, k = 6;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = rand_f64(ta ? Shape{B, k, m} : Shape{B, m, k}, 10 + ta, -1, 1, false);
      Tensor b = rand_f64(tb ? Shape{B, n, k} : Shape{B, k, n}, 20 + tb, -1, 1, false);
      Tensor c = ops::matmul(a, b, ta, tb);
      CHECK(c.shape() == Shape{B, m, n});
      CHECK(max_abs_diff(c.to_vector_f64(), naive(a, b, ta, tb, B, m, n, k)) < 1e-12);
      // f32 goes through sgemm: the same numbers to f32 rounding (k = 6 products of |x| < 1).
      Tensor c32 = ops::matmul(a.to(DType::F32), b.to(DType::F32), ta, tb);
      CHECK(max_abs_diff(c32.to_vector_f64(), naive(a, b, ta, tb, B, m, n, k)) < 1e-5);
    }
}

TEST_CASE("matmul gradients, 2-D and batched, all transpose flags") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      auto f = [&](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); };
      CHECK(gradcheck(f, {rand_f64(ta ? Shape{3, 2} : Shape{2, 3}, 1), rand_f64(tb ? Shape{4, 3} : Shape{3, 4}, 2)}) ==
            "");
      CHECK(gradcheck(f, {rand_f64(ta ? Shape{2, 3, 2} : Shape{2, 2, 3}, 3),
                          rand_f64(tb ? Shape{2, 4, 3} : Shape{2, 3, 4}, 4)}) == "");
    }
}

TEST_CASE("matmul gradient flows to only the operand that requires it") {
  Tensor a = rand_f64({2, 3}, 5);
  Tensor b = rand_f64({3, 4}, 6, -1, 1, false);
  CHECK(gradcheck([](auto& in) { return ops::matmul(in[0], in[1]); }, {a, b}) == "");
}

TEST_CASE("linear forward: y = x w^T + b over leading dims") {
  Tensor x = rand_f64({2, 3, 5}, 7, -1, 1, false), w = rand_f64({4, 5}, 8, -1, 1, false),
         b = rand_f64({4}, 9, -1, 1, false);
  Tensor y = ops::linear(x, w, b);
  CHECK(y.shape() == Shape{2, 3, 4});
  std::vector<double> ref = naive(x.view({6, 5}), w, false, true, 1, 6, 4, 5);
  std::vector<double> vb = b.to_vector_f64();
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += vb[i % 4];
  CHECK(max_abs_diff(y.to_vector_f64(), ref) < 1e-12);
}

TEST_CASE("linear gradients with and without bias") {
  auto with_bias = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); };
  auto no_bias = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); };
  CHECK(gradcheck(with_bias, {rand_f64({3, 5}, 11), rand_f64({4, 5}, 12), rand_f64({4}, 13)}) == "");
  CHECK(gradcheck(with_bias, {rand_f64({2, 3, 5}, 14), rand_f64({2, 5}, 15), rand_f64({2}, 16)}) == "");
  CHECK(gradcheck(no_bias, {rand_f64({3, 5}, 17), rand_f64({4, 5}, 18)}) == "");
  // Frozen weight, trainable input: only dx is computed.
  CHECK(gradcheck(no_bias, {rand_f64({3, 5}, 19), rand_f64({4, 5}, 20, -1, 1, false)}) == "");
  // Frozen weight, trainable bias: db cannot ride on the dW GEMM and takes the separate column sum.
  CHECK(gradcheck(with_bias, {rand_f64({3, 5}, 21), rand_f64({4, 5}, 22, -1, 1, false), rand_f64({4}, 23)}) == "");
}

TEST_CASE("shape errors say what to fix") {
  Tensor a = rand_f64({2, 3}, 1, -1, 1, false), b = rand_f64({4, 5}, 2, -1, 1, false);
  CHECK_THROWS_WITH_AS(ops::matmul(a, b), doctest::Contains("inner dimensions differ"), Error);
  CHECK_THROWS_WITH_AS(ops::linear(a, b), doctest::Contains("must end in in_features"), Error);
  CHECK_THROWS_AS(ops::linear(rand_f64({2, 5}, 3, -1, 1, false), b, rand_f64({3}, 4, -1, 1, false)), Error);
}

TEST_CASE("allow_tf32 is a process-wide setting, changed only for a BackendScope's lifetime") {
  const bool prev = backend().allow_tf32;
  {
    BackendConfig c = backend();
    c.allow_tf32 = !prev;
    BackendScope scope(c);
    CHECK(backend().allow_tf32 == !prev);
  }
  CHECK(backend().allow_tf32 == prev);
}
