// tests/test_conv_onednn.cpp: the oneDNN CPU convolution (core/ops/conv/cpu_onednn.cpp) against the
// im2col + OpenBLAS reference (core/ops/conv/cpu.cpp, forced with BackendConfig::cpu_onednn off),
// forward, backward data and backward filter, on random shapes with stride, padding, dilation and
// groups; f32 always, bf16 where the CPU has AVX512_BF16. Then the op layer: conv2d with oneDNN on
// and off gives the same y, dx, dw through autograd, and f64 never reaches oneDNN.
// Without oneDNN in the build the cases are skipped with a message (nothing to compare).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/backend.h"
#include "core/ops/conv/cpu_onednn.h"
#include "core/ops/ops.h"
#include "tests/support/conv_params.h"

using namespace tandem;

namespace {

// f32 epsilon: the two paths sum the same L products in different orders, each partial sum
// rounding by at most eps of its size; with values in [-1, 1] a sum of L terms stays below L, so
// 4 L eps bounds the difference with room to spare, while a wrong index or layout errs by O(1).
constexpr double kF32Eps = 1.1920929e-7;
// bf16 keeps 8 significant bits: both paths round an f32 result once, and results that straddle a
// rounding boundary may land one bf16 step (2^-8 relative) apart, so two steps are allowed.
constexpr double kBf16Rel = 1.0 / 128;

bool cpu_has(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

kernels::ConvGeom random_geom(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  kernels::ConvGeom g;
  for (;;) {
    const int groups = std::array{1, 1, 1, 2, 3}[pick(0, 4)];
    g.p = testing::conv_params(pick(1, 3), pick(0, 2), pick(1, 2), groups);
    g.p.stride_w = pick(1, 2);  // unequal axes too
    g.p.pad_w = pick(0, 1);
    g.n = pick(1, 3);
    g.h = pick(3, 11);
    g.w = pick(3, 11);
    g.c = groups * pick(1, 5);
    g.o = groups * pick(1, 6);
    g.kh = pick(1, 3);
    g.kw = pick(1, 3);
    const int64_t eh = g.p.dilation_h * (g.kh - 1) + 1, ew = g.p.dilation_w * (g.kw - 1) + 1;
    if (g.h + 2 * g.p.pad_h < eh || g.w + 2 * g.p.pad_w < ew) continue;
    g.oh = (g.h + 2 * g.p.pad_h - eh) / g.p.stride_h + 1;
    g.ow = (g.w + 2 * g.p.pad_w - ew) / g.p.stride_w + 1;
    return g;
  }
}

std::string describe(const kernels::ConvGeom& g) {
  std::ostringstream s;
  s << "x " << g.n << "x" << g.h << "x" << g.w << "x" << g.c << ", w " << g.o << "x" << g.kh << "x" << g.kw
    << " groups " << g.p.groups << ", stride " << g.p.stride_h << "," << g.p.stride_w << ", pad " << g.p.pad_h << ","
    << g.p.pad_w << ", dilation " << g.p.dilation_h << "," << g.p.dilation_w;
  return s.str();
}

// Uniform [-1, 1] values, already representable in `dt` (so both paths read the same numbers).
Tensor random_tensor(const Shape& shape, DType dt, std::mt19937& rng) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, shape, DType::F32).to(dt);
}

// |a - b| <= 4 L eps (+ 2 bf16 steps of |b| for bf16), elementwise; the first mismatch is reported.
void check_close(const Tensor& got, const Tensor& ref, int64_t sum_len, DType dt, const std::string& what) {
  const auto a = got.to(DType::F32).to_vector(), b = ref.to(DType::F32).to_vector();
  REQUIRE(a.size() == b.size());
  const double atol = 4.0 * static_cast<double>(sum_len) * kF32Eps, rtol = dt == DType::BF16 ? kBf16Rel : 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i])) continue;
    FAIL_CHECK(what << ": element " << i << " oneDNN " << a[i] << " vs im2col " << b[i] << " (tolerance "
                    << atol + rtol * std::fabs(b[i]) << ")");
    return;
  }
}

void compare_one(const kernels::ConvGeom& g, DType dt, std::mt19937& rng) {
  const int64_t cg = g.c / g.p.groups;
  Tensor x = random_tensor({g.n, g.h, g.w, g.c}, dt, rng);
  Tensor w = random_tensor({g.o, g.kh, g.kw, cg}, dt, rng);
  Tensor dy = random_tensor({g.n, g.oh, g.ow, g.o}, dt, rng);
  Tensor y1 = Tensor::empty(dy.shape(), dt), dx1 = Tensor::empty(x.shape(), dt), dw1 = Tensor::empty(w.shape(), dt);
  Tensor y0 = Tensor::empty(dy.shape(), dt), dx0 = Tensor::empty(x.shape(), dt), dw0 = Tensor::empty(w.shape(), dt);
  const std::string what = describe(g) + " " + dtype_name(dt);
  {
    BackendScope on(&BackendConfig::cpu_onednn, true);
    REQUIRE_MESSAGE(kernels::conv2d_forward_onednn(g, x, w, y1), "oneDNN refused the forward of " << what);
    REQUIRE_MESSAGE(kernels::conv2d_backward_data_onednn(g, dy, w, dx1), "oneDNN refused backward data of " << what);
    REQUIRE_MESSAGE(kernels::conv2d_backward_filter_onednn(g, x, dy, dw1),
                    "oneDNN refused backward filter of " << what);
  }
  {
    BackendScope off(&BackendConfig::cpu_onednn, false);
    kernels::conv2d_forward_cpu(g, x, w, y0);
    kernels::conv2d_backward_data_cpu(g, dy, w, dx0);
    kernels::conv2d_backward_filter_cpu(g, x, dy, dw0);
  }
  // Summation lengths: forward KH KW Cg; backward data at most KH KW Og (windows that overlap);
  // backward filter N OH OW.
  check_close(y1, y0, g.kh * g.kw * cg, dt, "forward, " + what);
  check_close(dx1, dx0, g.kh * g.kw * (g.o / g.p.groups), dt, "backward data, " + what);
  check_close(dw1, dw0, g.n * g.oh * g.ow, dt, "backward filter, " + what);
}

// The ResNet/VGG shapes the models run (smaller batch), where oneDNN's JIT kernels, not its
// reference fallbacks, are chosen: 7x7/2 stem, 3x3 same, 3x3/2, 1x1/2 shortcut, 1x1 bottleneck.
kernels::ConvGeom model_geom(int64_t n, int64_t hw, int64_t c, int64_t o, int64_t k, int stride) {
  kernels::ConvGeom g;
  g.p = testing::conv_params(stride, k / 2, 1, 1);
  g.n = n, g.h = g.w = hw, g.c = c, g.o = o, g.kh = g.kw = k;
  g.oh = g.ow = (hw + 2 * (k / 2) - k) / stride + 1;
  return g;
}
const kernels::ConvGeom kModelShapes[] = {model_geom(2, 32, 3, 64, 7, 2),  model_geom(2, 16, 64, 64, 3, 1),
                                          model_geom(2, 16, 64, 128, 3, 2), model_geom(2, 16, 64, 128, 1, 2),
                                          model_geom(2, 8, 128, 512, 1, 1)};

// Deep layers of ResNet-18/VGG at 64 px: many channels on 2x2-8x8 images, where forward and backward
// data run on oneDNN's blocked activation layout with per-call reorders (onednn_blocked_activations).
// Batch 1 and the smallest such layers: the im2col reference must run them too, and CI's time counts.
const kernels::ConvGeom kBlockedShapes[] = {model_geom(1, 4, 256, 512, 3, 2), model_geom(1, 4, 256, 512, 1, 2),
                                            model_geom(1, 2, 512, 256, 3, 1)};

}  // namespace

TEST_CASE("oneDNN conv on the blocked activation layout matches the im2col reference, f32 and bf16") {
  if (!kernels::onednn_built()) {
    MESSAGE("skipped: this build has no oneDNN");
    return;
  }
  // The rule answers both ways: these shapes take the blocked path, a narrow or large-image one not,
  // and backward filter never (it keeps NHWC).
  for (const auto& g : kBlockedShapes) {
    CHECK_MESSAGE(kernels::onednn_blocked_activations(g, false), describe(g) << " should run blocked");
    CHECK_FALSE(kernels::onednn_blocked_activations(g, true));
  }
  CHECK_FALSE(kernels::onednn_blocked_activations(model_geom(2, 4, 128, 128, 3, 1), false));
  CHECK_FALSE(kernels::onednn_blocked_activations(model_geom(2, 16, 256, 256, 3, 1), false));
  // Backward filter's measured exceptions: 2x2 outputs, and 4x4 ones with a 512 x 3 x 3 window, run
  // the reference; a 256-channel 4x4 or a 512-channel 8x8 problem runs oneDNN.
  CHECK_FALSE(kernels::onednn_preferred_for_backward_filter(model_geom(2, 2, 512, 512, 3, 1)));
  CHECK_FALSE(kernels::onednn_preferred_for_backward_filter(model_geom(2, 4, 512, 512, 3, 1)));
  CHECK(kernels::onednn_preferred_for_backward_filter(model_geom(2, 4, 256, 256, 3, 1)));
  CHECK(kernels::onednn_preferred_for_backward_filter(model_geom(2, 8, 512, 512, 3, 1)));
  std::mt19937 rng(2611);
  for (const auto& g : kBlockedShapes) compare_one(g, DType::F32, rng);
  if (cpu_has("avx512_bf16")) compare_one(kBlockedShapes[0], DType::BF16, rng);  // one: the layout code is shared
}

TEST_CASE("oneDNN conv matches the im2col reference, f32, random shapes") {
  if (!kernels::onednn_built()) {
    MESSAGE("skipped: this build has no oneDNN (apt-get install libdnnl-dev), so only the reference exists");
    return;
  }
  std::mt19937 rng(20261128);
  for (int i = 0; i < 60; ++i) compare_one(random_geom(rng), DType::F32, rng);
  for (const auto& g : kModelShapes) compare_one(g, DType::F32, rng);
}

TEST_CASE("oneDNN conv matches the im2col reference, bf16, where the CPU has AVX512_BF16") {
  if (!kernels::onednn_built()) {
    MESSAGE("skipped: this build has no oneDNN");
    return;
  }
  if (!cpu_has("avx512_bf16")) {
    MESSAGE("skipped: this CPU has no avx512_bf16 in /proc/cpuinfo; oneDNN would emulate bf16, which is not the "
            "path a bf16 run would take on hardware with it");
    return;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 30; ++i) compare_one(random_geom(rng), DType::BF16, rng);
  for (const auto& g : kModelShapes) compare_one(g, DType::BF16, rng);
}

TEST_CASE("conv2d through autograd: oneDNN on and off give the same y, dx, dw; f64 stays on the reference") {
  std::mt19937 rng(3);
  const auto p = testing::conv_params(2, 1, 1, 1);
  Tensor x0 = random_tensor({2, 9, 9, 4}, DType::F32, rng), w0 = random_tensor({6, 3, 3, 4}, DType::F32, rng);
  std::vector<std::vector<float>> got[2];
  for (int on = 0; on < 2; ++on) {
    BackendScope s(&BackendConfig::cpu_onednn, on == 1);
    Tensor x = x0.detach().clone().set_requires_grad(true), w = w0.detach().clone().set_requires_grad(true);
    Tensor y = ops::conv2d(x, w, Tensor(), p);
    ops::sum(ops::mul(y, y)).backward();
    got[on] = {y.to_vector(), x.grad().to_vector(), w.grad().to_vector()};
  }
  for (size_t k = 0; k < 3; ++k) {
    REQUIRE(got[0][k].size() == got[1][k].size());
    double worst = 0;
    for (size_t i = 0; i < got[0][k].size(); ++i)
      worst = std::max(worst, std::fabs(double(got[0][k][i]) - got[1][k][i]) / (1 + std::fabs(got[0][k][i])));
    // Loss = sum y^2: dy = 2y is itself a conv output, so errors compound; 1e-4 relative is many
    // f32 roundings of headroom and far below a wrong result.
    CHECK_MESSAGE(worst < 1e-4, "output " << k << " (y, dx, dw) differs by " << worst);
  }
  const kernels::ConvGeom g = model_geom(1, 8, 4, 4, 3, 1);
  Tensor xd = Tensor::zeros({1, 8, 8, 4}, DType::F64), wd = Tensor::zeros({4, 3, 3, 4}, DType::F64);
  Tensor yd = Tensor::empty({1, 8, 8, 4}, DType::F64);
  CHECK_FALSE(kernels::conv2d_forward_onednn(g, xd, wd, yd));  // f64: gradient checks keep the reference
}
