// tests/test_conv_bias_relu.cpp: ops::conv2d_bias_relu and the AlexNet/VGG conv stack that uses it,
// on the CPU, against the composition they replace: relu(conv2d(x, w, b)).
//   - values: bit-equal to the composition in f64 and f32 (the same conv kernel, and relu(x + b)
//     is rounded once either way), and in bf16 (rounding and ReLU commute);
//   - ReLU's edge rules: NaN stays NaN, the gradient at exactly 0 is 0 (PyTorch's subgradient);
//   - gradients: equal to the composition's (x, w, b), and f64 finite differences;
//   - ConvReluSequential (layers/models/features_classifier.h): output, gradients and hooks as the
//     plain Sequential gives them.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "layers/models/features_classifier.h"
#include "tests/support/conv_params.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::conv_params;
using testing::gradcheck;
using testing::max_abs_diff;
using testing::rand_f64;

namespace {

struct Grads {
  std::vector<double> y, dx, dw, db;
};

// y and the gradients of <y, g> for a fixed random g, through `fused` or the composition.
Grads run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const ops::Conv2dParams& p, DType dt) {
  Tensor x = x0.to(dt).detach(), w = w0.to(dt).detach(), b = b0.defined() ? b0.to(dt).detach() : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (b.defined()) b.set_requires_grad(true);
  Tensor y = fused ? ops::conv2d_bias_relu(x, w, b, p) : ops::relu(ops::conv2d(x, w, b, p));
  Tensor g = rand_f64(y.shape(), 77, -1, 1, false).to(dt);
  y.backward(g);
  Grads r{y.to_vector_f64(), x.grad().to_vector_f64(), w.grad().to_vector_f64(), {}};
  if (b.defined()) r.db = b.grad().to_vector_f64();
  return r;
}

void check_same(const Grads& a, const Grads& b, double tol) {
  CHECK(max_abs_diff(a.y, b.y) <= tol);
  CHECK(max_abs_diff(a.dx, b.dx) <= tol);
  CHECK(max_abs_diff(a.dw, b.dw) <= tol);
  CHECK(max_abs_diff(a.db, b.db) <= tol);
}

}  // namespace

TEST_CASE("conv2d_bias_relu equals relu(conv2d(x, w, b)), forward and backward") {
  struct Case {
    const char* name;
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
  };
  const Case cases[] = {
      {"3x3 same (VGG)", {2, 6, 6, 3}, {5, 3, 3, 3}, conv_params(1, 1, 1, 1), true},
      {"11x11 stride 4 (AlexNet stem)", {1, 23, 23, 3}, {4, 11, 11, 3}, conv_params(4, 2, 1, 1), true},
      {"no bias", {2, 5, 5, 4}, {3, 3, 3, 4}, conv_params(1, 1, 1, 1), false},
      {"grouped, stride 2", {1, 7, 7, 4}, {6, 3, 3, 2}, conv_params(2, 1, 1, 2), true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Tensor x = rand_f64(c.x, 1, -1, 1, false), w = rand_f64(c.w, 2, -1, 1, false);
    Tensor b = c.bias ? rand_f64({c.w[0]}, 3, -1, 1, false) : Tensor();
    for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
      CAPTURE(dtype_name(dt));
      Grads fused = run(true, x, w, b, c.p, dt), ref = run(false, x, w, b, c.p, dt);
      // Same kernels, same rounding points: equal bits, except the bias gradient's summation (the
      // fused pass sums dz per column in one sweep; sum_to_trailing may group it differently).
      CHECK(max_abs_diff(fused.y, ref.y) == 0);
      CHECK(max_abs_diff(fused.dx, ref.dx) == 0);
      CHECK(max_abs_diff(fused.dw, ref.dw) == 0);
      const double db_tol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 2e-2;  // bf16: one rounding of ~|db|
      CHECK(max_abs_diff(fused.db, ref.db) <= db_tol);
      // Some outputs are clipped, some not: the mask is exercised both ways.
      int zeros = 0;
      for (double v : fused.y) zeros += v == 0;
      CHECK(zeros > 0);
      CHECK(zeros < static_cast<int>(fused.y.size()));
    }
  }
}

TEST_CASE("conv2d_bias_relu: NaN stays NaN, and the gradient at exactly 0 is 0") {
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = rand_f64({1, 4, 4, 2}, 5, -1, 1, false);
  // All-zero weights and bias: every pre-activation is exactly 0, so y = 0 and every gradient is 0.
  Tensor w = Tensor::zeros({3, 3, 3, 2}, DType::F64), b = Tensor::zeros({3}, DType::F64);
  Grads z = run(true, x, w, b, p, DType::F64);
  for (double v : z.y) CHECK(v == 0);
  CHECK(max_abs_diff(z.dx, std::vector<double>(z.dx.size(), 0.0)) == 0);
  CHECK(max_abs_diff(z.dw, std::vector<double>(z.dw.size(), 0.0)) == 0);
  CHECK(max_abs_diff(z.db, std::vector<double>(z.db.size(), 0.0)) == 0);
  // A NaN bias for channel 1: that channel is NaN everywhere (a diverged run stays visible), the
  // others are untouched, and the NaN channel's gradient passes through as ReLU's does.
  std::vector<double> bv = {0.5, std::numeric_limits<double>::quiet_NaN(), -0.25};
  Tensor bn = Tensor::from_vector_f64(bv, {3});  // f64; run() casts it
  Tensor w2 = rand_f64({3, 3, 3, 2}, 6, -1, 1, false);
  Grads fused = run(true, x, w2, bn, p, DType::F32), ref = run(false, x, w2, bn, p, DType::F32);
  for (size_t i = 0; i < fused.y.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isnan(fused.y[i]) == (i % 3 == 1));
    if (!std::isnan(ref.y[i])) CHECK(fused.y[i] == ref.y[i]);
  }
}

TEST_CASE("conv2d_bias_relu gradients by finite differences (f64)") {
  // Random values keep every pre-activation far (> 1e-6, the step) from ReLU's kink at 0.
  auto f = [](const std::vector<Tensor>& in) { return ops::conv2d_bias_relu(in[0], in[1], in[2], conv_params(1, 1, 1, 1)); };
  CHECK(gradcheck(f, {rand_f64({2, 5, 4, 3}, 11), rand_f64({4, 3, 3, 3}, 12), rand_f64({4}, 13)}) == "");
  auto strided = [](const std::vector<Tensor>& in) {
    return ops::conv2d_bias_relu(in[0], in[1], in[2], conv_params(2, 2, 1, 1));
  };
  CHECK(gradcheck(strided, {rand_f64({1, 9, 9, 3}, 14), rand_f64({2, 5, 5, 3}, 15), rand_f64({2}, 16)}) == "");
  auto no_bias = [](const std::vector<Tensor>& in) {
    return ops::conv2d_bias_relu(in[0], in[1], Tensor(), conv_params(1, 0, 1, 1));
  };
  CHECK(gradcheck(no_bias, {rand_f64({2, 4, 4, 3}, 17), rand_f64({3, 1, 1, 3}, 18)}) == "");
}

TEST_CASE("ConvReluSequential runs Conv2d -> ReLU as one op with the plain Sequential's values and gradients") {
  Generator gen(3);
  Conv2dOptions o;
  o.padding = 1;
  auto stack = std::make_shared<models::ConvReluSequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(3, 4, 3, o, &gen), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2, 2),
      std::make_shared<Conv2d>(4, 5, 3, o, &gen), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(5, 2, 3, o, &gen)});  // a trailing conv with no ReLU stays plain
  Tensor x = rand_f64({2, 6, 6, 3}, 21, -1, 1, false).to(DType::F32);
  Tensor g = rand_f64({2, 3, 3, 2}, 22, -1, 1, false).to(DType::F32);

  int conv_hooks = 0, relu_hooks = 0;
  auto h0 = (*stack)[0]->register_forward_pre_hook([&](Module&) { ++conv_hooks; });
  auto h1 = (*stack)[1]->register_forward_pre_hook([&](Module&) { ++relu_hooks; });
  auto grads = [&](bool fused) {
    for (Tensor prm : stack->parameters()) prm.set_grad(Tensor());
    Tensor h = x;
    if (fused) {
      h = (*stack)(h);
    } else {
      for (size_t i = 0; i < stack->size(); ++i) h = (*(*stack)[i])(h);
    }
    h.backward(g);
    std::vector<double> all = h.to_vector_f64();
    for (auto& prm : stack->parameters()) {
      std::vector<double> v = prm.grad().to_vector_f64();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  std::vector<double> fused = grads(true);
  CHECK(conv_hooks == 1);  // the conv's hooks run (ZeRO-3 gathers there); the fused-away ReLU's do not
  CHECK(relu_hooks == 0);
  std::vector<double> plain = grads(false);
  REQUIRE(fused.size() == plain.size());
  CHECK(max_abs_diff(fused, plain) <= 1e-5);  // bias gradients are summed in another order
}
