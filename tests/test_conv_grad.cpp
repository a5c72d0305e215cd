// tests/test_conv_grad.cpp: conv2d on the CPU. The im2col + GEMM forward is compared against a
// naive direct convolution (seven nested loops, no shared code), then f64 finite-difference
// gradients are checked for stride, padding, dilation, groups (incl. depthwise) and bias.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/support/conv_params.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::conv_params;
using testing::gradcheck;
using testing::rand_f64;

namespace {

struct Case {
  const char* name;
  int64_t n, h, w, c, o, kh, kw;
  ops::Conv2dParams p;
};

// Direct NHWC/OHWI cross-correlation straight from the definition.
std::vector<double> direct_conv(const Case& t, const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>* b, int64_t& oh, int64_t& ow) {
  const auto& p = t.p;
  oh = (t.h + 2 * p.pad_h - p.dilation_h * (t.kh - 1) - 1) / p.stride_h + 1;
  ow = (t.w + 2 * p.pad_w - p.dilation_w * (t.kw - 1) - 1) / p.stride_w + 1;
  int64_t cg = t.c / p.groups, og = t.o / p.groups;
  std::vector<double> y(t.n * oh * ow * t.o, 0.0);
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t yy = 0; yy < oh; ++yy)
      for (int64_t xx = 0; xx < ow; ++xx)
        for (int64_t o = 0; o < t.o; ++o) {
          double acc = b ? (*b)[o] : 0.0;
          int64_t grp = o / og;
          for (int64_t ky = 0; ky < t.kh; ++ky)
            for (int64_t kx = 0; kx < t.kw; ++kx)
              for (int64_t ci = 0; ci < cg; ++ci) {
                int64_t iy = yy * p.stride_h - p.pad_h + ky * p.dilation_h;
                int64_t ix = xx * p.stride_w - p.pad_w + kx * p.dilation_w;
                if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.w) continue;
                acc += x[((n * t.h + iy) * t.w + ix) * t.c + grp * cg + ci] * w[((o * t.kh + ky) * t.kw + kx) * cg + ci];
              }
          y[((n * oh + yy) * ow + xx) * t.o + o] = acc;
        }
  return y;
}

const Case kCases[] = {
    {"3x3 same", 2, 5, 5, 3, 4, 3, 3, conv_params(1, 1, 1, 1)},
    {"3x3 stride 2", 2, 6, 5, 3, 4, 3, 3, conv_params(2, 1, 1, 1)},
    {"1x1 direct path", 2, 4, 3, 5, 6, 1, 1, conv_params(1, 0, 1, 1)},
    {"1x1 stride 2", 1, 5, 5, 4, 3, 1, 1, conv_params(2, 0, 1, 1)},
    {"dilated 3x3", 1, 7, 6, 2, 3, 3, 3, conv_params(1, 2, 2, 1)},
    {"grouped", 2, 4, 4, 4, 6, 3, 3, conv_params(1, 1, 1, 2)},
    {"depthwise", 2, 5, 4, 3, 3, 3, 3, conv_params(2, 1, 1, 3)},
    {"depthwise multiplier 2", 1, 4, 4, 2, 4, 3, 3, conv_params(1, 1, 1, 2)},
    {"7x7 stride 2 stem-like", 1, 9, 9, 3, 2, 7, 7, conv_params(2, 3, 1, 1)},
};

}  // namespace

TEST_CASE("conv2d forward equals a direct convolution (f64 and f32)") {
  for (const Case& t : kCases) {
    CAPTURE(t.name);
    Tensor x = rand_f64({t.n, t.h, t.w, t.c}, 1, -1, 1, false);
    Tensor w = rand_f64({t.o, t.kh, t.kw, t.c / t.p.groups}, 2, -1, 1, false);
    Tensor b = rand_f64({t.o}, 3, -1, 1, false);
    std::vector<double> vb = b.to_vector_f64();
    int64_t oh = 0, ow = 0;
    std::vector<double> ref = direct_conv(t, x.to_vector_f64(), w.to_vector_f64(), &vb, oh, ow);
    Tensor y = ops::conv2d(x, w, b, t.p);
    REQUIRE(y.shape() == Shape{t.n, oh, ow, t.o});
    std::vector<double> got = y.to_vector_f64();
    double err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(got[i] - ref[i]));
    CHECK(err < 1e-12);
    // f32 (sgemm): at most 7*7*3 = 147 products of |v| < 1 per output, so 1e-5 covers f32 rounding.
    std::vector<float> got32 = ops::conv2d(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32), t.p).to_vector();
    double err32 = 0;
    for (size_t i = 0; i < ref.size(); ++i) err32 = std::max(err32, std::fabs(got32[i] - ref[i]));
    CHECK(err32 < 1e-5);
  }
}

TEST_CASE("conv2d gradients (x, w, bias) by finite differences") {
  for (const Case& t : kCases) {
    CAPTURE(t.name);
    auto f = [&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], in[2], t.p); };
    CHECK(gradcheck(f, {rand_f64({t.n, t.h, t.w, t.c}, 4), rand_f64({t.o, t.kh, t.kw, t.c / t.p.groups}, 5),
                        rand_f64({t.o}, 6)}) == "");
  }
}

TEST_CASE("conv2d without bias, gradient to one input only") {
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  auto f = [&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], Tensor(), p); };
  CHECK(gradcheck(f, {rand_f64({1, 4, 4, 2}, 7), rand_f64({3, 3, 3, 2}, 8, -1, 1, false)}) == "");
  CHECK(gradcheck(f, {rand_f64({1, 4, 4, 2}, 9, -1, 1, false), rand_f64({3, 3, 3, 2}, 10)}) == "");
}

TEST_CASE("conv2d rejects bad shapes with an actionable message") {
  Tensor x = rand_f64({1, 4, 4, 3}, 1, -1, 1, false);
  CHECK_THROWS_WITH_AS(ops::conv2d(x, rand_f64({2, 3, 3, 2}, 2, -1, 1, false), Tensor(), {}),
                       doctest::Contains("C/groups"), Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x, rand_f64({2, 5, 5, 3}, 3, -1, 1, false), Tensor(), {}),
                       doctest::Contains("does not fit"), Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x, rand_f64({2, 3, 3, 3}, 4, -1, 1, false), Tensor(), conv_params(1, 1, 1, 2)),
                       doctest::Contains("must divide"), Error);
}
