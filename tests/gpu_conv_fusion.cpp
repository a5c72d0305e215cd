// tests/gpu_conv_fusion.cpp: conv2d_bias_relu's cuDNN frontend graph (core/ops/conv/cuda_graph.cpp)
// against the CPU reference relu(conv2d(x, w, b)), forward and backward, f32 (strict and TF32) and
// bf16, at AlexNet's and VGG16's layer shapes; and that the graph, not the fallback, ran.
// Exits 77 (Skipped) without a GPU. Written in a session without a GPU: never run yet.
//
// The ReLU mask must not depend on rounding, or one flipped element would move dx and dw by a whole
// dy * w term: weights are scaled to 0.3 / sqrt(fan_in), so |conv(x, w)| stays well below 3 (10
// sigma), and the bias is +3 or -3 per channel, so every pre-activation keeps its bias's sign on both
// backends, and both the passing and the clipped channels are exercised. (The exact-0 and NaN rules
// are the CPU test's, tests/test_conv_bias_relu.cpp; the NaN case below asks cuDNN's RELU_FWD.)
// Tolerances, as tests/gpu_matmul_conv_parity.cpp's and for the same reasons:
//   f32 strict 1e-4 rel / 1e-3 abs (f32 accumulation order), TF32 2e-2 / 5e-2 (10-bit mantissa
//   inputs), bf16 2e-2 / 2e-2 (one bf16 rounding of y, dx, dw, db; REDUCED_PRECISION_REDUCTION wgrad).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/conv_params.h"
#include "tests/support/parity.h"

using namespace tandem;
using testing::conv_params;
using testing::parity_check;
using testing::Tolerance;

namespace {

struct Precision {
  const char* name;
  DType dtype;
  bool tf32;
  Tolerance tol;
};
const Precision kPrecisions[] = {
    {"f32 strict", DType::F32, false, {1e-4, 1e-3, "f32 accumulation order"}},
    {"f32 tf32", DType::F32, true, {2e-2, 5e-2, "TF32 keeps 10 mantissa bits of each input"}},
    {"bf16", DType::BF16, false, {2e-2, 2e-2, "bf16 rounding of y, dx, dw, db (2^-9)"}},
};

struct Layer {
  const char* name;
  Shape x, w;  // NHWC input (batch 2, spatial size cut for the CPU reference), OHWI weight
  ops::Conv2dParams p;
};
// AlexNet's five convs and VGG16's distinct (C_in, C_out) pairs, at reduced spatial size.
const Layer kLayers[] = {
    {"alexnet conv1 11x11/4", {2, 63, 63, 3}, {64, 11, 11, 3}, conv_params(4, 2, 1, 1)},
    {"alexnet conv2 5x5", {2, 13, 13, 64}, {192, 5, 5, 64}, conv_params(1, 2, 1, 1)},
    {"alexnet conv3 3x3", {2, 6, 6, 192}, {384, 3, 3, 192}, conv_params(1, 1, 1, 1)},
    {"alexnet conv4 3x3", {2, 6, 6, 384}, {256, 3, 3, 384}, conv_params(1, 1, 1, 1)},
    {"vgg16 conv1_1 (C = 3)", {2, 32, 32, 3}, {64, 3, 3, 3}, conv_params(1, 1, 1, 1)},
    {"vgg16 conv1_2", {2, 32, 32, 64}, {64, 3, 3, 64}, conv_params(1, 1, 1, 1)},
    {"vgg16 conv2_1", {2, 16, 16, 64}, {128, 3, 3, 64}, conv_params(1, 1, 1, 1)},
    {"vgg16 conv3_2", {2, 8, 8, 256}, {256, 3, 3, 256}, conv_params(1, 1, 1, 1)},
    {"vgg16 conv4_1", {2, 4, 4, 256}, {512, 3, 3, 256}, conv_params(1, 1, 1, 1)},
};

Tensor weights(const Shape& s, uint64_t seed) {
  Generator g(seed);
  const double fan_in = static_cast<double>(s[1] * s[2] * s[3]);
  return ops::scale(randn(s, g), static_cast<float>(0.3 / std::sqrt(fan_in)));
}
Tensor signed_bias(int64_t o) {  // +3, -3, +3, ...: half the channels pass, half are clipped
  std::vector<float> v(static_cast<size_t>(o));
  for (int64_t i = 0; i < o; ++i) v[i] = i % 2 ? -3.f : 3.f;
  return Tensor::from_vector(v, {o});
}

}  // namespace

TEST_CASE("conv2d_bias_relu: the cuDNN graph matches relu(conv2d) on the CPU, forward and backward, and did not fall back") {
  REQUIRE_MESSAGE(ops::conv_bias_relu_stats().frontend, "this build has no cuDNN frontend: run apps/scripts/setup.sh (or pass "
                                   "-DCUDNN_FRONTEND_INCLUDE_DIR) so conv2d_bias_relu can build its graph");
  for (const Precision& pr : kPrecisions) {
    CAPTURE(pr.name);
    BackendConfig c = backend();
    c.allow_tf32 = pr.tf32;
    c.conv_bias_fusion = true;
    BackendScope scope(c);
    const ops::ConvBiasReluStats before = ops::conv_bias_relu_stats();
    for (const Layer& l : kLayers) {
      CAPTURE(l.name);
      Generator gx(1);
      auto fused = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], in[2], l.p)};
      };
      CHECK(parity_check(fused, {randn(l.x, gx), weights(l.w, 2), signed_bias(l.w[0])}, pr.dtype, pr.tol) == "");
      auto no_bias = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], Tensor(), l.p)};
      };
      if (l.x[3] == 64)  // one no-bias graph per precision is enough; its mask is random, so f32 strict only
        if (pr.dtype == DType::F32 && !pr.tf32)
          CHECK(parity_check(no_bias, {randn(l.x, gx), weights(l.w, 3)}, pr.dtype, pr.tol) == "");
    }
    const ops::ConvBiasReluStats after = ops::conv_bias_relu_stats();
    CHECK(after.fused - before.fused > 0);
    // bf16 and TF32 (what the trainers run): an H100 takes every AlexNet/VGG shape in one graph.
    // Strict f32 may lack a runtime-fusion engine without tensor cores; its fallback is allowed.
    if (pr.dtype == DType::BF16 || pr.tf32) CHECK(after.unfused - before.unfused == 0);
  }
}

TEST_CASE("conv2d_bias_relu at full ImageNet size (VGG16 conv1_2, AlexNet conv1) builds its graph, bf16") {
  BackendScope scope(&BackendConfig::conv_bias_fusion, true);
  const ops::ConvBiasReluStats before = ops::conv_bias_relu_stats();
  const Device gpu = Device::cuda(0);
  Generator g(5);
  Tensor x = randn({8, 224, 224, 64}, g).to(DType::BF16).to(gpu);
  Tensor w = weights({64, 3, 3, 64}, 6).to(DType::BF16).to(gpu), b = signed_bias(64).to(DType::BF16).to(gpu);
  Tensor y = ops::conv2d_bias_relu(x, w, b, conv_params(1, 1, 1, 1));
  Tensor x1 = randn({8, 224, 224, 3}, g).to(DType::BF16).to(gpu);
  Tensor w1 = weights({64, 11, 11, 3}, 7).to(DType::BF16).to(gpu);
  Tensor y1 = ops::conv2d_bias_relu(x1, w1, b, conv_params(4, 2, 1, 1));
  // Spot check against the GPU's own unfused path (same dgrad-free forward, other engine).
  Tensor ref = ops::relu(ops::conv2d(x, w, b, conv_params(1, 1, 1, 1)));
  std::vector<float> a = y.to(Device::cpu()).to(DType::F32).to_vector(), r = ref.to(Device::cpu()).to(DType::F32).to_vector();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - r[i]) / (1.0 + std::fabs(r[i])));
  CHECK(worst < 2e-2);  // two bf16 roundings apart at most
  CHECK(y1.shape() == Shape{8, 55, 55, 64});
  const ops::ConvBiasReluStats after = ops::conv_bias_relu_stats();
  CHECK(after.unfused - before.unfused == 0);
  CHECK(after.fused - before.fused == 2);
}

TEST_CASE("conv2d_bias_relu with the fusion switched off takes the conv + one bias+ReLU pass, same values") {
  BackendScope scope(&BackendConfig::conv_bias_fusion, false);
  const ops::ConvBiasReluStats before = ops::conv_bias_relu_stats();
  const Layer& l = kLayers[5];
  Generator gx(9);
  auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], in[2], l.p)}; };
  CHECK(parity_check(f, {randn(l.x, gx), weights(l.w, 10), signed_bias(l.w[0])}, DType::BF16, kPrecisions[2].tol) == "");
  const ops::ConvBiasReluStats after = ops::conv_bias_relu_stats();
  CHECK(after.fused == before.fused);  // the switch is honoured: no graph
  CHECK(after.unfused == before.unfused);
}

TEST_CASE("conv2d_bias_relu on the GPU keeps a NaN a NaN (ReLU's rule), as the CPU does") {
  // cuDNN's RELU_FWD is max(x, lower clip) in its docs; whether max(NaN, 0) gives NaN is not said.
  // tandem's ReLU keeps NaN visible (core/ops/elementwise/functors.h): this pins the graph to it.
  const Device gpu = Device::cuda(0);
  Generator g(11);
  Tensor x = randn({2, 8, 8, 64}, g).to(gpu), w = weights({64, 3, 3, 64}, 12).to(gpu);
  std::vector<float> bv(64, 0.5f);
  bv[7] = std::numeric_limits<float>::quiet_NaN();
  Tensor b = Tensor::from_vector(bv, {64}).to(gpu);
  std::vector<float> y = ops::conv2d_bias_relu(x, w, b, conv_params(1, 1, 1, 1)).to(Device::cpu()).to_vector();
  for (size_t i = 0; i < y.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isnan(y[i]) == (i % 64 == 7));
  }
}
