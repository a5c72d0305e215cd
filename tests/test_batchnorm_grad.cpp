// tests/test_batchnorm_grad.cpp: batch_norm forward values against a hand computation, running
// statistic updates, and f64 finite-difference gradient checks in training and eval mode; the
// fused tails batch_norm_relu and batch_norm_add_relu against their compositions, and
// BatchNorm2d::forward_relu against relu(forward(x)).
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/layers.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {

// Per-channel mean and biased variance of a [M, C] row-major buffer, the slow obvious way.
void channel_stats(const std::vector<double>& x, int64_t C, std::vector<double>& mean, std::vector<double>& var) {
  int64_t M = static_cast<int64_t>(x.size()) / C;
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t r = 0; r < M; ++r) mean[c] += x[r * C + c];
    mean[c] /= M;
    for (int64_t r = 0; r < M; ++r) var[c] += (x[r * C + c] - mean[c]) * (x[r * C + c] - mean[c]);
    var[c] /= M;
  }
}

}  // namespace

TEST_CASE("training forward and running statistics match a hand computation, both layouts") {
  for (Shape shape : {Shape{2, 3, 2, 4}, Shape{6, 4}}) {
    const int64_t C = 4, M = shape_numel(shape) / C;
    Tensor x = rand_f64(shape, 11, -2.0, 3.0, false);
    Tensor w = rand_f64({C}, 12, 0.5, 1.5, false), b = rand_f64({C}, 13, -0.5, 0.5, false);
    Tensor rm = rand_f64({C}, 14, -1.0, 1.0, false), rv = rand_f64({C}, 15, 0.5, 2.0, false);
    std::vector<double> rm0 = rm.to_vector_f64(), rv0 = rv.to_vector_f64();
    const double momentum = 0.25, eps = 1e-3;
    Tensor y = ops::batch_norm(x, w, b, rm, rv, true, momentum, eps);

    std::vector<double> xv = x.to_vector_f64(), wv = w.to_vector_f64(), bv = b.to_vector_f64();
    std::vector<double> mean, var;
    channel_stats(xv, C, mean, var);
    std::vector<double> yv = y.to_vector_f64(), rmv = rm.to_vector_f64(), rvv = rv.to_vector_f64();
    for (int64_t c = 0; c < C; ++c) {
      CHECK(rmv[c] == doctest::Approx((1 - momentum) * rm0[c] + momentum * mean[c]).epsilon(1e-12));
      // The running variance uses the unbiased estimate M / (M - 1) * var.
      CHECK(rvv[c] == doctest::Approx((1 - momentum) * rv0[c] + momentum * var[c] * M / (M - 1)).epsilon(1e-12));
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t c = i % C;
      double expect = (xv[i] - mean[c]) / std::sqrt(var[c] + eps) * wv[c] + bv[c];
      CHECK(yv[i] == doctest::Approx(expect).epsilon(1e-12));
    }
  }
}

TEST_CASE("eval forward uses the running statistics and leaves them unchanged") {
  const int64_t C = 3;
  Tensor x = rand_f64({2, 2, 2, C}, 21, -1, 1, false);
  Tensor w = rand_f64({C}, 22, 0.5, 1.5, false), b = rand_f64({C}, 23, -0.5, 0.5, false);
  Tensor rm = rand_f64({C}, 24, -1, 1, false), rv = rand_f64({C}, 25, 0.5, 2, false);
  std::vector<double> rm0 = rm.to_vector_f64(), rv0 = rv.to_vector_f64();
  Tensor y = ops::batch_norm(x, w, b, rm, rv, false);
  CHECK(rm.to_vector_f64() == rm0);
  CHECK(rv.to_vector_f64() == rv0);
  std::vector<double> xv = x.to_vector_f64(), yv = y.to_vector_f64(), wv = w.to_vector_f64(), bv = b.to_vector_f64();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t c = i % C;
    CHECK(yv[i] == doctest::Approx((xv[i] - rm0[c]) / std::sqrt(rv0[c] + 1e-5) * wv[c] + bv[c]).epsilon(1e-12));
  }
}

TEST_CASE("training backward goes through the batch statistics (gradcheck, both layouts)") {
  for (Shape shape : {Shape{2, 3, 2, 3}, Shape{5, 3}}) {
    Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
    auto f = [&](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5); };
    CHECK(gradcheck(f, {rand_f64(shape, 31, -2, 2), rand_f64({3}, 32, 0.5, 1.5), rand_f64({3}, 33)}) == "");
  }
}

TEST_CASE("training without affine parameters or running statistics") {
  Tensor none;
  auto f = [&](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], none, none, none, none, true); };
  CHECK(gradcheck(f, {rand_f64({4, 2, 2, 2}, 41, -1, 1)}) == "");
  // Normalised output: zero mean, unit (biased) variance per channel, up to eps.
  Tensor y = f({rand_f64({8, 2}, 42, -3, 5, false)});
  std::vector<double> mean, var;
  channel_stats(y.to_vector_f64(), 2, mean, var);
  for (int c = 0; c < 2; ++c) {
    CHECK(std::fabs(mean[c]) < 1e-12);
    CHECK(var[c] == doctest::Approx(1.0).epsilon(1e-3));
  }
}

TEST_CASE("eval backward is the affine map with running statistics (gradcheck)") {
  Tensor rm = rand_f64({3}, 51, -1, 1, false), rv = rand_f64({3}, 52, 0.5, 2, false);
  auto f = [&](const std::vector<Tensor>& in) { return ops::batch_norm(in[0], in[1], in[2], rm, rv, false); };
  CHECK(gradcheck(f, {rand_f64({2, 2, 3, 3}, 53), rand_f64({3}, 54, 0.5, 1.5), rand_f64({3}, 55)}) == "");
  CHECK(gradcheck(f, {rand_f64({4, 3}, 56), rand_f64({3}, 57, 0.5, 1.5), rand_f64({3}, 58)}) == "");
}

TEST_CASE("batch_norm rejects what it cannot normalise") {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3}), w = Tensor::ones({3}), b = Tensor::zeros({3});
  // One value per channel in training: the variance is undefined.
  CHECK_THROWS_AS(ops::batch_norm(Tensor::ones({1, 3}), w, b, rm, rv, true), Error);
  // Parameters must be [C] in the parameter dtype.
  CHECK_THROWS_AS(ops::batch_norm(Tensor::ones({4, 2}), w, b, rm, rv, true), Error);
  Tensor w64 = Tensor::ones({3}, DType::F64);
  CHECK_THROWS_AS(ops::batch_norm(Tensor::ones({4, 3}), w64, b, rm, rv, true), Error);
  Tensor none;
  CHECK_THROWS_AS(ops::batch_norm(Tensor::ones({4, 3}), w, b, none, none, false), Error);
}

TEST_CASE("batch_norm_add_relu: equals relu(batch_norm(x) + z); gradients for x, z, weight, bias") {
  // The residual z shifts about half the sums below 0, so the ReLU mask matters; values within
  // the finite-difference step of the kink are unlikely with these seeds (gradcheck would say).
  for (Shape shape : {Shape{2, 3, 2, 3}, Shape{5, 3}}) {
    Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
    auto f = [&](const std::vector<Tensor>& in) {
      return ops::batch_norm_add_relu(in[0], in[1], in[2], in[3], rm, rv, true, 0.1, 1e-5);
    };
    CHECK(gradcheck(f, {rand_f64(shape, 61, -2, 2), rand_f64(shape, 62, -1, 1), rand_f64({3}, 63, 0.5, 1.5),
                        rand_f64({3}, 64)}) == "");
    Tensor x = rand_f64(shape, 65, -2, 2, false), z = rand_f64(shape, 66, -1, 1, false);
    Tensor w = rand_f64({3}, 67, 0.5, 1.5, false), b = rand_f64({3}, 68, -1, 1, false);
    Tensor rm1 = Tensor::zeros({3}, DType::F64), rv1 = Tensor::ones({3}, DType::F64);
    Tensor rm2 = Tensor::zeros({3}, DType::F64), rv2 = Tensor::ones({3}, DType::F64);
    Tensor fused = ops::batch_norm_add_relu(x, z, w, b, rm1, rv1, true);
    Tensor ref = ops::relu(ops::add(ops::batch_norm(x, w, b, rm2, rv2, true), z));
    CHECK(fused.to_vector_f64() == ref.to_vector_f64());
    CHECK(rm1.to_vector_f64() == rm2.to_vector_f64());  // running stats updated once, the same way
  }
  {  // eval mode (BatchNorm2d::forward_add_relu in a validation pass): the running statistics
    Tensor rm = rand_f64({3}, 71, -0.5, 0.5, false), rv = rand_f64({3}, 72, 0.5, 2.0, false);
    auto f = [&](const std::vector<Tensor>& in) {
      return ops::batch_norm_add_relu(in[0], in[1], in[2], in[3], rm, rv, false, 0.1, 1e-5);
    };
    CHECK(gradcheck(f, {rand_f64({2, 2, 2, 3}, 73, -2, 2), rand_f64({2, 2, 2, 3}, 74, -1, 1),
                        rand_f64({3}, 75, 0.5, 1.5), rand_f64({3}, 76)}) == "");
  }
  Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
  Tensor none;
  CHECK_THROWS_WITH_AS(ops::batch_norm_add_relu(rand_f64({4, 3}, 69), rand_f64({2, 3}, 70), none, none, rm, rv, true),
                       doctest::Contains("must have the shape of x"), Error);
}

TEST_CASE("batch_norm_relu: equals relu(batch_norm(x)) bit for bit; gradients for x, weight, bias (train, eval)") {
  // Biases in [-1, 1] put the ReLU's kink inside every channel's range, so the mask matters; values
  // within the finite-difference step of the kink are unlikely with these seeds (gradcheck would say).
  for (Shape shape : {Shape{2, 3, 2, 3}, Shape{5, 3}}) {
    INFO(shape_str(shape));
    Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64);
    auto f = [&](const std::vector<Tensor>& in) {
      return ops::batch_norm_relu(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5);
    };
    CHECK(gradcheck(f, {rand_f64(shape, 81, -2, 2), rand_f64({3}, 82, 0.5, 1.5), rand_f64({3}, 83)}) == "");
    Tensor x = rand_f64(shape, 84, -2, 2, false), w = rand_f64({3}, 85, 0.5, 1.5, false);
    Tensor b = rand_f64({3}, 86, -1, 1, false);
    Tensor rm1 = Tensor::zeros({3}, DType::F64), rv1 = Tensor::ones({3}, DType::F64);
    Tensor rm2 = Tensor::zeros({3}, DType::F64), rv2 = Tensor::ones({3}, DType::F64);
    Tensor fused = ops::batch_norm_relu(x, w, b, rm1, rv1, true);
    Tensor ref = ops::relu(ops::batch_norm(x, w, b, rm2, rv2, true));
    CHECK(fused.to_vector_f64() == ref.to_vector_f64());
    CHECK(rm1.to_vector_f64() == rm2.to_vector_f64());  // running stats updated once, the same way
    CHECK(rv1.to_vector_f64() == rv2.to_vector_f64());
    size_t zeros = 0;
    for (double v : fused.to_vector_f64()) zeros += v == 0.0;
    CHECK(zeros > 0);  // the ReLU cut something: the mask was exercised
  }
  {  // eval mode (BatchNorm2d::forward_relu in a validation pass): the running statistics, unchanged
    Tensor rm = rand_f64({3}, 87, -0.5, 0.5, false), rv = rand_f64({3}, 88, 0.5, 2.0, false);
    const std::vector<double> rm0 = rm.to_vector_f64(), rv0 = rv.to_vector_f64();
    auto f = [&](const std::vector<Tensor>& in) {
      return ops::batch_norm_relu(in[0], in[1], in[2], rm, rv, false, 0.1, 1e-5);
    };
    CHECK(gradcheck(f, {rand_f64({2, 2, 2, 3}, 89, -2, 2), rand_f64({3}, 90, 0.5, 1.5), rand_f64({3}, 91)}) == "");
    CHECK(rm.to_vector_f64() == rm0);
    CHECK(rv.to_vector_f64() == rv0);
  }
  Tensor rm = Tensor::zeros({3}, DType::F64), rv = Tensor::ones({3}, DType::F64), none;
  CHECK_THROWS_WITH_AS(ops::batch_norm_relu(rand_f64({1, 3}, 92), none, none, rm, rv, true),
                       doctest::Contains("more than one value per channel"), Error);
}

TEST_CASE("BatchNorm2d::forward_relu equals relu(forward(x)) and counts the batch, in train and eval") {
  BatchNorm2d a(3), b(3);
  Generator g(5);
  for (bool training : {true, false}) {
    INFO("training ", training);
    a.train(training), b.train(training);
    Tensor x = ops::scale(randn({2, 3, 3, 3}, g), 2.0f);
    Tensor xa = x.detach().set_requires_grad(true), xb = x.detach().clone().set_requires_grad(true);
    Tensor ya = a.forward_relu(xa), yb = ops::relu(b(xb));
    CHECK(ya.to_vector() == yb.to_vector());
    ops::sum(ops::mul(ya, ya)).backward();
    ops::sum(ops::mul(yb, yb)).backward();
    CHECK(xa.grad().to_vector() == xb.grad().to_vector());
    CHECK(a.weight().grad().to_vector() == b.weight().grad().to_vector());
    CHECK(a.bias().grad().to_vector() == b.bias().grad().to_vector());
    CHECK(a.running_mean().to_vector() == b.running_mean().to_vector());
    CHECK(a.num_batches_tracked().to_vector_i64() == b.num_batches_tracked().to_vector_i64());
    a.zero_grad(), b.zero_grad();
  }
  CHECK(a.num_batches_tracked().to_vector_i64() == std::vector<int64_t>{1});
}
