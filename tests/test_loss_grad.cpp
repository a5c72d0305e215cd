// tests/test_loss_grad.cpp: cross_entropy (gradient checks, hand-computed values, errors) and
// topk_correct on hand-made cases. CPU only; tests/gpu_opsb_parity.cpp covers CUDA.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {
Tensor labels_i64(std::vector<int64_t> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return Tensor::from_vector_i64(v, s);
}
}  // namespace

TEST_CASE("cross_entropy gradient, with and without label smoothing") {
  Tensor labels = labels_i64({0, 4, 2, 4});
  for (float s : {0.0f, 0.1f, 0.5f}) {
    CAPTURE(s);
    auto f = [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], labels, s); };
    // Spread the logits over [-3, 3) so the softmax is far from uniform.
    CHECK(gradcheck(f, {rand_f64({4, 5}, 11, -3, 3)}) == "");
  }
}

TEST_CASE("cross_entropy forward matches hand-computed values") {
  // Row 0: logits [1, 2, 3], label 2: lse = 3 + log(1 + e^-1 + e^-2); -log p2 = lse - 3.
  // Row 1: logits [0, 0, 0], label 0: -log p0 = log 3.
  double lse0 = 3.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  double plain = ((lse0 - 3.0) + std::log(3.0)) / 2.0;  // = 0.75310913...
  // Smoothing s: row loss = lse - (1-s) x[label] - (s/C) sum x. Row 1 is unchanged (all zeros).
  double s = 0.1;
  double smooth = ((lse0 - (1 - s) * 3.0 - (s / 3.0) * 6.0) + std::log(3.0)) / 2.0;
  CHECK(plain == doctest::Approx(0.7531091).epsilon(1e-6));  // the formula itself, evaluated by hand

  Tensor x64 = Tensor::from_vector_f64({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor lab = labels_i64({2, 0});
  CHECK(ops::cross_entropy(x64, lab).item() == doctest::Approx(plain).epsilon(1e-12));
  CHECK(ops::cross_entropy(x64, lab, 0.1f).item() == doctest::Approx(smooth).epsilon(1e-7));

  // f32 logits, i32 labels: the loss is f32, of shape [1].
  Tensor x32 = Tensor::from_vector({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor lab32 = Tensor::from_vector_i64({2, 0}, {2}, DType::I32);
  Tensor l32 = ops::cross_entropy(x32, lab32);
  CHECK(l32.dtype() == DType::F32);
  CHECK(l32.shape() == Shape{1});
  CHECK(l32.item() == doctest::Approx(plain).epsilon(1e-6));

  // Max subtraction: shifting a row by 1000 changes nothing (exp(1000) would overflow).
  Tensor big = Tensor::from_vector({1001, 1002, 1003, -1000, -1000, -1000}, {2, 3});
  CHECK(ops::cross_entropy(big, lab).item() == doctest::Approx(plain).epsilon(1e-5));
}

TEST_CASE("cross_entropy backward is (softmax - target) / N") {
  Tensor x = Tensor::from_vector_f64({1, 2, 3, 0, 0, 0}, {2, 3});
  x.set_requires_grad(true);
  ops::cross_entropy(x, labels_i64({2, 0})).backward();
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  std::vector<double> want = {std::exp(1.0) / z / 2, std::exp(2.0) / z / 2, (std::exp(3.0) / z - 1) / 2,
                              (1.0 / 3 - 1) / 2, 1.0 / 3 / 2, 1.0 / 3 / 2};
  std::vector<double> got = x.grad().to_vector_f64();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("cross_entropy rejects bad labels and shapes with a clear error") {
  Tensor x = Tensor::from_vector({1, 2, 3, 0, 0, 0}, {2, 3});
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, labels_i64({3, 0})), doctest::Contains("outside [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, labels_i64({0, -1})), doctest::Contains("label -1 at row 1"), Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, labels_i64({0, 1, 2})), doctest::Contains("one label per row"), Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x.view({6}), labels_i64({0})), doctest::Contains("[N, C]"), Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, Tensor::from_vector({0, 1}, {2})), doctest::Contains("i64"), Error);
  CHECK_THROWS_AS(ops::cross_entropy(x, labels_i64({0, 1}), 1.5f), Error);
  CHECK_THROWS_WITH_AS(ops::topk_correct(x, labels_i64({0, 9}), 1), doctest::Contains("outside"), Error);
  CHECK(ops::take_bad_label_count() == 0);  // CPU labels throw instead of being clamped and counted
  // ignore_index: the bad label is reported at its row in the full batch, not among the kept rows.
  CHECK_THROWS_WITH_AS(ops::cross_entropy(x, labels_i64({-100, 7}), 0.0f, -100), doctest::Contains("label 7 at row 1"),
                       Error);
}

TEST_CASE("topk_correct on a hand-made batch") {
  // 4 rows x 6 classes.
  //   row 0: label 1 holds the maximum               -> top-1 and top-5
  //   row 1: label 0 is the 3rd largest              -> top-5 only
  //   row 2: label 5 is the smallest                 -> neither
  //   row 3: label 2 ties with the maximum at class 0 -> top-5 only (ties go to the lower index, as
  //          torch.argmax; tests/test_nonfinite_ops.cpp has the NaN and constant rows)
  Tensor x = Tensor::from_vector({0.1f, 0.9f, 0.2f, 0.3f, 0.4f, 0.5f,  //
                                  0.5f, 0.9f, 0.1f, 0.7f, 0.2f, 0.3f,  //
                                  0.6f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f,  //
                                  0.8f, 0.1f, 0.8f, 0.2f, 0.3f, 0.4f},
                                 {4, 6});
  Tensor lab = labels_i64({1, 0, 5, 2});
  CHECK(ops::topk_correct(x, lab, 1) == 1);
  CHECK(ops::topk_correct(x, lab, 2) == 2);  // row 3's label is second only to the tie's lower index
  CHECK(ops::topk_correct(x, lab, 5) == 3);
  CHECK(ops::topk_correct(x, lab, 6) == 4);  // k = C: every row
  CHECK(ops::topk_correct(x.to(DType::F64), Tensor::from_vector_i64({1, 0, 5, 2}, {4}, DType::I32), 1) == 1);
  CHECK_THROWS_AS(ops::topk_correct(x, lab, 0), Error);
}
