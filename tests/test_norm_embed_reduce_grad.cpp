// tests/test_norm_embed_reduce_grad.cpp: layer_norm, embedding, sum and mean: f64 gradient checks,
// hand-computed forwards and the error paths. CPU only; tests/gpu_opsb_parity.cpp covers CUDA.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

TEST_CASE("layer_norm gradient for x, weight and bias") {
  auto f = [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]); };
  CHECK(gradcheck(f, {rand_f64({3, 5}, 1, -2, 2), rand_f64({5}, 2, 0.5, 1.5), rand_f64({5}, 3)}) == "");
  // 3-D input: normalisation is over the last dim only.
  CHECK(gradcheck(f, {rand_f64({2, 2, 4}, 4, -2, 2), rand_f64({4}, 5, 0.5, 1.5), rand_f64({4}, 6)}) == "");
}

TEST_CASE("layer_norm forward matches the formula") {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  Tensor x = Tensor::from_vector_f64({1, 2, 3, 4}, {1, 4});
  Tensor w = Tensor::from_vector_f64({1, 2, 1, 1}, {4});
  Tensor b = Tensor::from_vector_f64({0, 0, 0, 10}, {4});
  std::vector<double> y = ops::layer_norm(x, w, b, 1e-5).to_vector_f64();
  double rs = 1.0 / std::sqrt(1.25 + 1e-5);
  std::vector<double> want = {-1.5 * rs, -0.5 * rs * 2, 0.5 * rs, 1.5 * rs + 10};
  for (size_t i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-12));
  // f32 too (the statistics path for f32 differs from f64's only in the stored dtype).
  std::vector<float> y32 = ops::layer_norm(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32)).to_vector();
  for (size_t i = 0; i < 4; ++i) CHECK(y32[i] == doctest::Approx(want[i]).epsilon(1e-6));
}

TEST_CASE("layer_norm rejects mismatched parameters") {
  Tensor x = Tensor::zeros({2, 4});
  CHECK_THROWS_WITH_AS(ops::layer_norm(x, Tensor::ones({3}), Tensor::zeros({4})), doctest::Contains("weight"), Error);
  CHECK_THROWS_AS(ops::layer_norm(x, Tensor::ones({4}, DType::F64), Tensor::zeros({4}, DType::F64)), Error);
}

TEST_CASE("embedding table gradient with repeated indices") {
  Tensor idx = Tensor::from_vector_i64({1, 3, 1, 0, 1, 3}, {2, 3});
  auto f = [&](const std::vector<Tensor>& in) { return ops::embedding(idx, in[0]); };
  CHECK(gradcheck(f, {rand_f64({4, 3}, 7)}) == "");

  // With an all-ones upstream gradient, each table row's gradient is its index count: 1, 3, 0, 2.
  Tensor table = rand_f64({4, 3}, 8);
  Tensor out = ops::embedding(idx, table);
  CHECK(out.shape() == Shape{2, 3, 3});
  out.backward(Tensor::ones(out.shape(), DType::F64));
  std::vector<double> g = table.grad().to_vector_f64();
  std::vector<double> counts = {1, 3, 0, 2};
  for (size_t r = 0; r < 4; ++r)
    for (size_t j = 0; j < 3; ++j) CHECK(g[r * 3 + j] == counts[r]);

  // Forward is a copy of the rows; i32 indices give the same result.
  std::vector<double> t = table.to_vector_f64(), o = out.to_vector_f64();
  std::vector<int64_t> iv = {1, 3, 1, 0, 1, 3};
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t j = 0; j < 3; ++j) CHECK(o[i * 3 + j] == t[iv[i] * 3 + j]);
  Tensor o32 = ops::embedding(Tensor::from_vector_i64(iv, {6}, DType::I32), table);
  CHECK(o32.shape() == Shape{6, 3});
  CHECK(o32.to_vector_f64() == o);
}

TEST_CASE("embedding rejects an index outside the table") {
  Tensor table = Tensor::zeros({4, 2});
  CHECK_THROWS_WITH_AS(ops::embedding(Tensor::from_vector_i64({0, 4}, {2}), table),
                       doctest::Contains("index 4 at position 1"), Error);
  CHECK_THROWS_WITH_AS(ops::embedding(Tensor::from_vector_i64({-1}, {1}, DType::I32), table),
                       doctest::Contains("outside"), Error);
  CHECK_THROWS_AS(ops::embedding(Tensor::from_vector({0}, {1}), table), Error);  // float indices
}

TEST_CASE("sum and mean: values and gradients") {
  Tensor x = Tensor::from_vector_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(ops::sum(x).item() == 21.0);
  CHECK(ops::mean(x).item() == 3.5);
  CHECK(ops::sum(x).shape() == Shape{1});
  CHECK(ops::mean(x.to(DType::F32)).dtype() == DType::F32);
  CHECK(gradcheck([](auto& in) { return ops::sum(in[0]); }, {rand_f64({3, 4}, 9)}) == "");
  CHECK(gradcheck([](auto& in) { return ops::mean(in[0]); }, {rand_f64({3, 4}, 10)}) == "");
  // Composition: mean(x * x) has gradient 2x / n.
  Tensor y = rand_f64({5}, 11);
  ops::mean(ops::mul(y, y)).backward();
  std::vector<double> yv = y.to_vector_f64(), gv = y.grad().to_vector_f64();
  for (size_t i = 0; i < 5; ++i) CHECK(gv[i] == doctest::Approx(2 * yv[i] / 5).epsilon(1e-12));
  CHECK_THROWS_AS(ops::mean(Tensor::zeros({0})), Error);
  CHECK(ops::sum(Tensor::zeros({0})).item() == 0.0);
}
