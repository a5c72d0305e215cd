// tests/test_fused_bias_grad.cpp: bias_gelu and bias_dropout_add (core/ops/fused_bias/fused_bias.h) against
// the unfused op sequences they replace, their f64 gradient checks, the dropout mask they share
// with ops::dropout, and their argument checks.
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::max_abs_diff;
using testing::rand_f64;

TEST_CASE("bias_gelu equals gelu(x + bias), forward and backward") {
  Tensor x = rand_f64({3, 4, 6}, 1, -3, 3), b = rand_f64({6}, 2);
  Tensor g = rand_f64({3, 4, 6}, 3, -1, 1, false);
  Tensor y = ops::bias_gelu(x, b);
  y.backward(g);
  std::vector<double> y1 = y.to_vector_f64(), dx1 = x.grad().to_vector_f64(), db1 = b.grad().to_vector_f64();
  Tensor x2 = rand_f64({3, 4, 6}, 1, -3, 3), b2 = rand_f64({6}, 2);  // same values, fresh grads
  Tensor y2 = ops::gelu(ops::add(x2, b2));
  y2.backward(g);
  // Same functors in the same order: equal up to the summation order of the bias gradient.
  CHECK(max_abs_diff(y1, y2.to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(dx1, x2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(db1, b2.grad().to_vector_f64()) < 1e-14);
}

// In f32 (training) both forms must run the same GELU on the CPU: the fused tail's f32_math
// (core/ops/common/cpu/f32_math.h) and ops::gelu's, so that switching the fusion off (or the
// prediction head, which runs the unfused op) changes no bit. Wide inputs (|x + b| up to 8) reach
// both tails of Phi, where libm's erf and f32_math's fit round differently.
TEST_CASE("bias_gelu equals gelu(x + bias) bit for bit in f32 on the CPU, forward and backward") {
  auto f32 = [](const Tensor& t, bool grad) { return t.to(DType::F32).detach().set_requires_grad(grad); };
  const Tensor x64 = rand_f64({16, 8, 37}, 11, -6, 6, false), b64 = rand_f64({37}, 12, -2, 2, false);
  const Tensor g = f32(rand_f64({16, 8, 37}, 13, -1, 1, false), false);
  Tensor x = f32(x64, true), b = f32(b64, true);
  Tensor y = ops::bias_gelu(x, b);
  y.backward(g);
  Tensor x2 = f32(x64, true), b2 = f32(b64, true);
  Tensor y2 = ops::gelu(ops::add(x2, b2));
  y2.backward(g);
  CHECK(max_abs_diff(y.to_vector_f64(), y2.to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(x.grad().to_vector_f64(), x2.grad().to_vector_f64()) == 0.0);
  // The bias gradients are column sums of those same bits, each in double (possibly in another
  // order), rounded to f32 once: within an ulp.
  CHECK(max_abs_diff(b.grad().to_vector_f64(), b2.grad().to_vector_f64()) < 1e-5);
}

TEST_CASE("bias_gelu gradcheck (x and bias)") {
  CHECK(gradcheck([](auto& in) { return ops::bias_gelu(in[0], in[1]); }, {rand_f64({5, 7}, 4, -3, 3), rand_f64({7}, 5)}) ==
        "");
  CHECK(gradcheck([](auto& in) { return ops::bias_gelu(in[0], in[1]); },
                  {rand_f64({2, 3, 4}, 6, -3, 3), rand_f64({4}, 7)}) == "");
}

TEST_CASE("bias_dropout_add draws the mask of dropout(x + bias) and advances the generator alike") {
  const float p = 0.3f;
  Tensor x = rand_f64({8, 16}, 8), b = rand_f64({16}, 9), r = rand_f64({8, 16}, 10);
  Generator g1(42), g2(42);
  g1.advance(5);  // a non-zero offset, as after earlier draws
  g2.advance(5);
  Tensor fused = ops::bias_dropout_add(x, b, r, p, true, g1);
  Tensor unfused = ops::add(ops::dropout(ops::add(x, b), p, true, g2), r);
  CHECK(g1.offset() == g2.offset());
  CHECK(g1.offset() == 5 + 8 * 16);
  // residual + (x + b) * (1 / (1 - p)) in the same order on both sides: equal in f64.
  CHECK(max_abs_diff(fused.to_vector_f64(), unfused.to_vector_f64()) == 0.0);
  // Some elements were dropped (y == residual) and some kept.
  std::vector<double> yv = fused.to_vector_f64(), rv = r.to_vector_f64();
  int64_t dropped = 0;
  for (size_t i = 0; i < yv.size(); ++i) dropped += yv[i] == rv[i];
  CHECK(dropped > 0);
  CHECK(dropped < static_cast<int64_t>(yv.size()));
}

TEST_CASE("bias_dropout_add in eval mode or with p = 0 adds bias and residual, drawing nothing") {
  Tensor x = rand_f64({4, 5}, 11), b = rand_f64({5}, 12), r = rand_f64({4, 5}, 13);
  Generator g(3);
  std::vector<double> ref = ops::add(ops::add(x, b), r).to_vector_f64();
  CHECK(max_abs_diff(ops::bias_dropout_add(x, b, r, 0.5f, false, g).to_vector_f64(), ref) < 1e-15);
  CHECK(max_abs_diff(ops::bias_dropout_add(x, b, r, 0.0f, true, g).to_vector_f64(), ref) < 1e-15);
  CHECK(g.offset() == 0);
  CHECK(gradcheck([&](auto& in) { return ops::bias_dropout_add(in[0], in[1], in[2], 0.5f, false, g); },
                  {x, b, r}) == "");
}

TEST_CASE("bias_dropout_add gradcheck in training mode with a fixed generator state") {
  Generator g(21);
  auto f = [&](const std::vector<Tensor>& in) {
    g.set_state(21, 100);  // every probe sees the same mask
    return ops::bias_dropout_add(in[0], in[1], in[2], 0.4f, true, g);
  };
  CHECK(gradcheck(f, {rand_f64({6, 5}, 14), rand_f64({5}, 15), rand_f64({6, 5}, 16)}) == "");
  CHECK(gradcheck(f, {rand_f64({2, 3, 4}, 17), rand_f64({4}, 18), rand_f64({2, 3, 4}, 19)}) == "");
  // Backward matches the unfused sequence's exactly (same mask, same scaling).
  Tensor x = rand_f64({6, 5}, 20), b = rand_f64({5}, 21), r = rand_f64({6, 5}, 22);
  Tensor dy = rand_f64({6, 5}, 23, -1, 1, false);
  f({x, b, r}).backward(dy);
  Tensor x2 = rand_f64({6, 5}, 20), b2 = rand_f64({5}, 21), r2 = rand_f64({6, 5}, 22);
  g.set_state(21, 100);
  ops::add(ops::dropout(ops::add(x2, b2), 0.4f, true, g), r2).backward(dy);
  CHECK(max_abs_diff(x.grad().to_vector_f64(), x2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(b.grad().to_vector_f64(), b2.grad().to_vector_f64()) < 1e-14);
  CHECK(max_abs_diff(r.grad().to_vector_f64(), r2.grad().to_vector_f64()) == 0.0);
}

TEST_CASE("fused bias ops in 16 bits on the CPU compute in f32 and round once") {
  Tensor x = rand_f64({4, 8}, 24, -2, 2, false), b = rand_f64({8}, 25, -1, 1, false);
  Tensor r = rand_f64({4, 8}, 26, -1, 1, false);
  auto bf = [](const Tensor& t) { return ops::cast_raw(ops::cast_raw(t, DType::F32), DType::BF16); };
  std::vector<float> ref = ops::bias_gelu(ops::cast_raw(bf(x), DType::F32), ops::cast_raw(bf(b), DType::F32)).to_vector();
  std::vector<float> got = ops::bias_gelu(bf(x), bf(b)).to_vector();
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1.0 / 128).scale(1e-3));
  Generator g1(7), g2(7);
  ref = ops::bias_dropout_add(ops::cast_raw(bf(x), DType::F32), ops::cast_raw(bf(b), DType::F32),
                              ops::cast_raw(bf(r), DType::F32), 0.25f, true, g1)
            .to_vector();
  got = ops::bias_dropout_add(bf(x), bf(b), bf(r), 0.25f, true, g2).to_vector();
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1.0 / 128).scale(1e-3));
}

TEST_CASE("fused bias ops reject mismatched arguments with a clear error") {
  Tensor x = rand_f64({4, 5}, 27, -1, 1, false), r = rand_f64({4, 5}, 28, -1, 1, false);
  Generator g(1);
  CHECK_THROWS_AS(ops::bias_gelu(x, rand_f64({4}, 29)), Error);               // bias is not [C]
  CHECK_THROWS_AS(ops::bias_gelu(x, rand_f64({1, 5}, 30)), Error);            // bias is not 1-D
  CHECK_THROWS_AS(ops::bias_gelu(x, ops::cast_raw(rand_f64({5}, 31), DType::F32)), Error);  // dtypes differ
  CHECK_THROWS_AS(ops::bias_dropout_add(x, rand_f64({5}, 32), rand_f64({5, 4}, 33), 0.1f, true, g), Error);
  CHECK_THROWS_AS(ops::bias_dropout_add(x, rand_f64({5}, 34), r, 1.5f, true, g), Error);
}

TEST_CASE("an empty batch: dx is empty and the bias gradient is zeros (the reference for the GPU)") {
  // x [0, C]: the column sums over no rows are 0, written on every backend (gpu_elementwise_parity
  // checks the CUDA kernels against this).
  for (bool dropout : {false, true}) {
    CAPTURE(dropout);
    Tensor x = Tensor::zeros({0, 6}, DType::F64).set_requires_grad(true);
    Tensor b = rand_f64({6}, 35);
    Generator g(3);
    Tensor y = dropout ? ops::bias_dropout_add(x, b, Tensor::zeros({0, 6}, DType::F64), 0.3f, true, g)
                       : ops::bias_gelu(x, b);
    CHECK(y.numel() == 0);
    y.backward(Tensor::zeros({0, 6}, DType::F64));
    REQUIRE(b.grad().defined());
    CHECK(b.grad().to_vector_f64() == std::vector<double>(6, 0.0));
  }
}

// linear_bias_gelu / linear_bias_dropout_add (issue 17.3): the GEMM and its tail as one op, the bias
// gradient taken from the weight-gradient GEMM (a column sum of dz on the CPU) instead of the tail's
// column-reduction kernel. Against the pair of ops they replace, forward and backward, in f64.
TEST_CASE("linear_bias_gelu equals bias_gelu(linear(h, w), b), forward and backward") {
  Tensor h = rand_f64({3, 4, 5}, 21, -2, 2), w = rand_f64({6, 5}, 22), b = rand_f64({6}, 23);
  Tensor g = rand_f64({3, 4, 6}, 24, -1, 1, false);
  Tensor y = ops::linear_bias_gelu(h, w, b);
  y.backward(g);
  Tensor h2 = rand_f64({3, 4, 5}, 21, -2, 2), w2 = rand_f64({6, 5}, 22), b2 = rand_f64({6}, 23);
  Tensor y2 = ops::bias_gelu(ops::linear(h2, w2), b2);
  y2.backward(g);
  CHECK(max_abs_diff(y.to_vector_f64(), y2.to_vector_f64()) == 0.0);  // the same kernels
  CHECK(max_abs_diff(h.grad().to_vector_f64(), h2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(w.grad().to_vector_f64(), w2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(b.grad().to_vector_f64(), b2.grad().to_vector_f64()) < 1e-14);  // summation order
}

TEST_CASE("linear_bias_dropout_add equals bias_dropout_add(linear(h, w), b, r), masks and gradients") {
  const float p = 0.25f;
  Tensor h = rand_f64({4, 7}, 31), w = rand_f64({8, 7}, 32), b = rand_f64({8}, 33), r = rand_f64({4, 8}, 34);
  Tensor g = rand_f64({4, 8}, 35, -1, 1, false);
  Generator g1(7), g2(7);
  Tensor y = ops::linear_bias_dropout_add(h, w, b, r, p, true, g1);
  y.backward(g);
  Tensor h2 = rand_f64({4, 7}, 31), w2 = rand_f64({8, 7}, 32), b2 = rand_f64({8}, 33), r2 = rand_f64({4, 8}, 34);
  Tensor y2 = ops::bias_dropout_add(ops::linear(h2, w2), b2, r2, p, true, g2);
  y2.backward(g);
  CHECK(g1.offset() == g2.offset());
  CHECK(max_abs_diff(y.to_vector_f64(), y2.to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(h.grad().to_vector_f64(), h2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(w.grad().to_vector_f64(), w2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(r.grad().to_vector_f64(), r2.grad().to_vector_f64()) == 0.0);
  CHECK(max_abs_diff(b.grad().to_vector_f64(), b2.grad().to_vector_f64()) < 1e-14);
}

TEST_CASE("linear_bias_gelu and linear_bias_dropout_add gradcheck (h, w, bias[, residual])") {
  CHECK(gradcheck([](auto& in) { return ops::linear_bias_gelu(in[0], in[1], in[2]); },
                  {rand_f64({2, 3, 4}, 41, -2, 2), rand_f64({5, 4}, 42), rand_f64({5}, 43)}) == "");
  CHECK(gradcheck(
            [](auto& in) {
              Generator gen(3);  // the same mask at every evaluation
              return ops::linear_bias_dropout_add(in[0], in[1], in[2], in[3], 0.3f, true, gen);
            },
            {rand_f64({3, 4}, 44), rand_f64({5, 4}, 45), rand_f64({5}, 46), rand_f64({3, 5}, 47)}) == "");
}
