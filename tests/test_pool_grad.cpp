// tests/test_pool_grad.cpp: pooling forward against naive loops written from PyTorch's rules, and
// f64 finite-difference gradient checks (inputs for max pooling are tie-free and far from kinks).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {

// PyTorch's pooling_output_shape, derived again here with floating-point floor/ceil.
int64_t out_size(int64_t in, int k, int s, int p, bool ceil_mode) {
  double v = static_cast<double>(in + 2 * p - k) / s;
  int64_t o = static_cast<int64_t>(ceil_mode ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

enum class Kind { Max, Avg };

// The slow obvious pooling loop over NHWC.
std::vector<double> naive_pool(const Tensor& x, const ops::Pool2dParams& p, Kind kind, Shape& out_shape) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t OH = out_size(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
  const int64_t OW = out_size(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
  out_shape = {N, OH, OW, C};
  std::vector<double> xv = x.to_vector_f64(), out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t valid = 0;
          for (int i = 0; i < p.kernel_h; ++i)
            for (int j = 0; j < p.kernel_w; ++j) {
              int64_t h = oh * p.stride_h - p.pad_h + i, w = ow * p.stride_w - p.pad_w + j;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              double v = xv[((n * H + h) * W + w) * C + c];
              best = std::max(best, v);
              sum += v;
              ++valid;
            }
          if (kind == Kind::Max) {
            out.push_back(best);
          } else {
            // Padded cells count, but only up to H + pad (a ceil_mode window can stick out further).
            int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
            int64_t he = std::min(hs + p.kernel_h, H + p.pad_h), we = std::min(ws + p.kernel_w, W + p.pad_w);
            out.push_back(sum / (p.count_include_pad ? (he - hs) * (we - ws) : valid));
          }
        }
  return out;
}

std::vector<double> naive_adaptive(const Tensor& x, int64_t OH, int64_t OW) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  std::vector<double> xv = x.to_vector_f64(), out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          auto lo = [](int64_t o, int64_t in, int64_t out) { return static_cast<int64_t>(std::floor(double(o) * in / out)); };
          auto hi = [](int64_t o, int64_t in, int64_t out) { return static_cast<int64_t>(std::ceil(double(o + 1) * in / out)); };
          double sum = 0;
          int64_t cnt = 0;
          for (int64_t h = lo(oh, H, OH); h < hi(oh, H, OH); ++h)
            for (int64_t w = lo(ow, W, OW); w < hi(ow, W, OW); ++w, ++cnt) sum += xv[((n * H + h) * W + w) * C + c];
          out.push_back(sum / cnt);
        }
  return out;
}

// Distinct values 0.05 apart in shuffled order: no ties, and a finite-difference step of 1e-6
// cannot change which cell is the maximum.
Tensor tie_free(const Shape& shape, unsigned seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (double& e : v) e = e * 0.05 - 1.0;
  Tensor t = Tensor::from_vector_f64(v, shape);
  t.set_requires_grad(true);
  return t;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

// ops' pool of `kind` on x gives the naive loop's shape and values, and passes gradcheck.
void check_against_naive(const Tensor& x, const ops::Pool2dParams& p, Kind kind) {
  auto pool = [&](const Tensor& in) { return kind == Kind::Max ? ops::max_pool2d(in, p) : ops::avg_pool2d(in, p); };
  Shape want_shape;
  std::vector<double> want = naive_pool(x, p, kind, want_shape);
  Tensor y = pool(x);
  CHECK(y.shape() == want_shape);
  check_close(y.to_vector_f64(), want);
  CHECK(gradcheck([&](auto& in) { return pool(in[0]); }, {x}) == "");
}

ops::Pool2dParams params(int k, int s, int p, bool ceil_mode = false, bool include_pad = true) {
  return {k, k, s, s, p, p, ceil_mode, include_pad};
}

}  // namespace

TEST_CASE("max_pool2d: overlapping windows with padding, forward and gradcheck") {
  for (auto [shape, p] : {std::pair{Shape{2, 5, 5, 3}, params(3, 2, 1)}, std::pair{Shape{1, 6, 7, 2}, params(3, 2, 1, true)},
                          std::pair{Shape{1, 4, 4, 2}, params(2, 2, 0)}, std::pair{Shape{1, 7, 5, 2}, params(3, 3, 0, true)}}) {
    check_against_naive(tie_free(shape, 3), p, Kind::Max);
  }
}

TEST_CASE("max_pool2d: ties send the gradient to the first maximum in row-major order") {
  Tensor x = Tensor::ones({1, 2, 2, 1}, DType::F64);
  x.set_requires_grad(true);
  ops::max_pool2d(x, params(2, 2, 0)).backward(Tensor::ones({1, 1, 1, 1}, DType::F64));
  CHECK(x.grad().to_vector_f64() == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE("max_pool2d: padding never wins, even against negative inputs") {
  Tensor x = Tensor::full({1, 2, 2, 1}, -5.0, DType::F64);
  CHECK(ops::max_pool2d(x, params(3, 2, 1)).to_vector_f64() == std::vector<double>{-5});
}

TEST_CASE("avg_pool2d: padding, count_include_pad and ceil_mode, forward and gradcheck") {
  for (bool include : {true, false})
    for (auto [shape, p] : {std::pair{Shape{2, 5, 5, 2}, params(3, 2, 1, false, include)},
                            std::pair{Shape{1, 6, 6, 2}, params(3, 2, 0, true, include)},
                            std::pair{Shape{1, 5, 6, 3}, params(3, 2, 1, true, include)},
                            std::pair{Shape{1, 4, 4, 1}, params(2, 2, 1, true, include)}}) {
      check_against_naive(rand_f64(shape, 5), p, Kind::Avg);
    }
}

TEST_CASE("ceil_mode drops a last window that would start in the right padding") {
  // H = 4, k = 2, s = 2, p = 1: ceil((4 + 2 - 2) / 2) + 1 = 3 windows start at -1, 1, 3, all in
  // the input. H = 5 would give ceil(5/2) + 1 = 4, but the 4th would start at 5 = H: dropped.
  CHECK(ops::avg_pool2d(rand_f64({1, 4, 4, 1}, 1, -1, 1, false), params(2, 2, 1, true)).shape() == Shape{1, 3, 3, 1});
  CHECK(ops::avg_pool2d(rand_f64({1, 5, 5, 1}, 1, -1, 1, false), params(2, 2, 1, true)).shape() == Shape{1, 3, 3, 1});
  CHECK(ops::max_pool2d(rand_f64({1, 6, 6, 1}, 1, -1, 1, false), params(3, 2, 0, true)).shape() == Shape{1, 3, 3, 1});
}

TEST_CASE("adaptive_avg_pool2d shrinking, growing (VGG's 2x2 -> 7x7) and uneven") {
  for (auto [shape, oh, ow] : {std::tuple{Shape{2, 5, 7, 2}, 3, 2}, std::tuple{Shape{1, 2, 2, 3}, 7, 7},
                               std::tuple{Shape{1, 2, 3, 2}, 3, 5}, std::tuple{Shape{1, 6, 6, 1}, 6, 6}}) {
    Tensor x = rand_f64(shape, 7);
    Tensor y = ops::adaptive_avg_pool2d(x, oh, ow);
    CHECK(y.shape() == Shape{shape[0], oh, ow, shape[3]});
    check_close(y.to_vector_f64(), naive_adaptive(x, oh, ow));
    CHECK(gradcheck([&](auto& in) { return ops::adaptive_avg_pool2d(in[0], oh, ow); }, {x}) == "");
  }
}

TEST_CASE("global_avg_pool is the per-channel plane mean, [N, H, W, C] -> [N, C]") {
  Tensor x = rand_f64({2, 3, 4, 5}, 9);
  Tensor y = ops::global_avg_pool(x);
  CHECK(y.shape() == Shape{2, 5});
  check_close(y.to_vector_f64(), naive_adaptive(x, 1, 1));
  CHECK(gradcheck([](auto& in) { return ops::global_avg_pool(in[0]); }, {x}) == "");
}

TEST_CASE("pooling rejects bad parameters with a clear error") {
  Tensor x = Tensor::ones({1, 4, 4, 1});
  CHECK_THROWS_AS(ops::max_pool2d(x, params(2, 2, 2)), Error);        // padding over half the kernel
  CHECK_THROWS_AS(ops::avg_pool2d(x, params(5, 1, 0)), Error);        // kernel larger than the input
  CHECK_THROWS_AS(ops::max_pool2d(Tensor::ones({4, 4}), params(2, 2, 0)), Error);  // not NHWC
  CHECK_THROWS_AS(ops::adaptive_avg_pool2d(x, 0, 1), Error);
}
