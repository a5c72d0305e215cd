// tests/gpu_conv_fusion.cpp: conv2d_bias_relu's cuDNN frontend graph (core/ops/conv/cuda_graph.cpp)
// against the CPU reference relu(conv2d(x, w, b)), forward and backward, f32 (strict and TF32) and
// bf16, at AlexNet's and VGG16's layer shapes; and that the graph, not the fallback, ran. Likewise
// the conv-BN fusion's graphs (conv2d_genstats, bn_finalize, and conv2d_bn_relu_genstats, the next
// conv's BN + ReLU prologue) at ResNet-50's shapes.
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
#include <iterator>
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

// The runs: strict f32, f32 with TF32, bf16 (what the trainers use), each with its tolerance.
struct Run {
  DType dtype;
  bool tf32;
  const char* name() const { return dtype == DType::BF16 ? "bf16" : tf32 ? "f32 tf32" : "f32 strict"; }
  Tolerance tol() const {
    if (dtype == DType::BF16) return {2e-2, 2e-2, "bf16 rounding of y, dx, dw, db (2^-9)"};
    if (tf32) return {2e-2, 5e-2, "TF32 keeps 10 mantissa bits of each input"};
    return {1e-4, 1e-3, "f32 accumulation order"};
  }
};
constexpr Run kRuns[] = {{DType::F32, false}, {DType::F32, true}, {DType::BF16, false}};

// Runs body(run) once per run with TF32 as the run wants and `fusion` (the switch under test) on,
// then checks the op's counters: some calls ran the graph, and none fell back in bf16 or TF32
// (what the trainers run: an H100 has a runtime-fusion engine for every shape here); strict f32
// may lack one without tensor cores, so its fallback is allowed.
template <class F>
void for_each_run(bool BackendConfig::*fusion, ops::GraphFusionStats (*stats)(), F body) {
  for (const Run& pr : kRuns) {
    CAPTURE(pr.name());
    BackendConfig c = backend();
    c.allow_tf32 = pr.tf32;
    c.*fusion = true;
    BackendScope scope(c);
    const ops::GraphFusionStats before = stats();
    body(pr);
    const ops::GraphFusionStats after = stats();
    CHECK(after.fused - before.fused > 0);
    if (pr.dtype == DType::BF16 || pr.tf32) CHECK(after.unfused - before.unfused == 0);
  }
}

// A square conv layer at batch 2 (the CPU computes the reference), spatial size cut where the
// full ImageNet size would make the CPU slow: hw x hw x c in, o filters k x k.
struct Layer {
  const char* name;
  int64_t hw, c, o, k;
  int stride, pad;
  Shape x() const { return {2, hw, hw, c}; }
  Shape w() const { return {o, k, k, c}; }
  ops::Conv2dParams p() const { return conv_params(stride, pad, 1, 1); }
};
// AlexNet's convs and VGG16's distinct (C_in, C_out) pairs.
const Layer kLayers[] = {
    {"alexnet conv1 11x11/4", 63, 3, 64, 11, 4, 2},   {"alexnet conv2 5x5", 13, 64, 192, 5, 1, 2},
    {"alexnet conv3 3x3", 6, 192, 384, 3, 1, 1},      {"alexnet conv4 3x3", 6, 384, 256, 3, 1, 1},
    {"vgg16 conv1_1 (C = 3)", 32, 3, 64, 3, 1, 1},    {"vgg16 conv1_2", 32, 64, 64, 3, 1, 1},
    {"vgg16 conv2_1", 16, 64, 128, 3, 1, 1},          {"vgg16 conv3_2", 8, 256, 256, 3, 1, 1},
    {"vgg16 conv4_1", 4, 256, 512, 3, 1, 1},
};

Tensor weights(const Shape& s, uint64_t seed) {
  Generator g(seed);
  const double fan_in = static_cast<double>(s[1] * s[2] * s[3]);
  return ops::scale(randn(s, g), static_cast<float>(0.3 / std::sqrt(fan_in)));
}
// Without a bias the margin comes from signs: inputs in [0.5, 1.5) and each filter's weights all of
// one sign (+ for even, - for odd output channels), so every pre-activation is a sum of same-signed
// terms, far from 0.
Tensor positive(const Shape& s, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v = rand(s, g).to_vector();
  for (float& e : v) e += 0.5f;
  return Tensor::from_vector(v, s);
}
Tensor signed_weights(const Shape& s, uint64_t seed) {
  std::vector<float> v = positive(s, seed).to_vector();
  const size_t per_filter = v.size() / static_cast<size_t>(s[0]);
  const float scale = 0.3f / static_cast<float>(per_filter);  // |conv| ~ 0.3
  for (size_t i = 0; i < v.size(); ++i) v[i] *= (i / per_filter) % 2 ? -scale : scale;
  return Tensor::from_vector(v, s);
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
  for_each_run(&BackendConfig::conv_bias_fusion, ops::conv_bias_relu_stats, [](const Run& pr) {
    for (const Layer& l : kLayers) {
      CAPTURE(l.name);
      Generator gx(1);
      auto fused = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], in[2], l.p())};
      };
      CHECK(parity_check(fused, {randn(l.x(), gx), weights(l.w(), 2), signed_bias(l.o)}, pr.dtype, pr.tol()) == "");
      auto no_bias = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], Tensor(), l.p())};
      };
      if (l.c == 64)  // the no-bias graph (no ADD node), on the 64-channel layers
        CHECK(parity_check(no_bias, {positive(l.x(), 3), signed_weights(l.w(), 4)}, pr.dtype, pr.tol()) == "");
    }
  });
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
  auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::conv2d_bias_relu(in[0], in[1], in[2], l.p())}; };
  CHECK(parity_check(f, {randn(l.x(), gx), weights(l.w(), 10), signed_bias(l.o)}, DType::BF16, kRuns[2].tol()) == "");
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

// ---- conv-BN fusion pieces (core/ops/conv_bn/conv_bn.h), BackendConfig::conv_bn_fusion on ----

namespace {
// ResNet-50's conv shapes (batch 2, spatial size cut for the CPU reference).
const Layer kResnetLayers[] = {
    {"resnet50 1x1 64->64", 14, 64, 64, 1, 1, 0},     {"resnet50 3x3 64->64", 14, 64, 64, 3, 1, 1},
    {"resnet50 1x1 64->256", 14, 64, 256, 1, 1, 0},   {"resnet50 3x3/2 128->128", 14, 128, 128, 3, 2, 1},
    {"resnet50 1x1 1024->256", 7, 1024, 256, 1, 1, 0}, {"resnet50 stem 7x7/2 3->64", 32, 3, 64, 7, 2, 3},
};

std::string compare(const char* what, const Tensor& ref, const Tensor& got, Tolerance tol) {
  return testing::compare_values(what, ref.to(Device::cpu()).to(DType::F32).to_vector(),
                                 got.to(Device::cpu()).to(DType::F32).to_vector(), tol);
}

// body(run, item) for every run (for_each_run: the conv-BN switch on, its counters checked) and
// every item of `items` (CAPTURE'd by its name).
template <class Items, class F>
void for_each_conv_bn_case(const Items& items, F body) {
  REQUIRE_MESSAGE(ops::conv_bn_fusion_stats().frontend, "this build has no cuDNN frontend: pass "
                                                       "-DCUDNN_FRONTEND_INCLUDE_DIR so the conv-BN graphs exist");
  for_each_run(&BackendConfig::conv_bn_fusion, ops::conv_bn_fusion_stats, [&](const Run& pr) {
    for (const auto& item : items) {
      CAPTURE(item.name);
      body(pr, item);
    }
  });
}
}  // namespace

TEST_CASE("conv2d_genstats: the conv + genstats graph's y, gradients and statistics match the CPU; no fallback") {
  const Device gpu = Device::cuda(0);
  for_each_conv_bn_case(kResnetLayers, [&](const Run& pr, const Layer& l) {
    Generator gx(20);
    auto y_only = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::conv2d_genstats(in[0], in[1], l.p()).y}; };
    CHECK(parity_check(y_only, {randn(l.x(), gx), weights(l.w(), 21)}, pr.dtype, pr.tol()) == "");
    // The statistics: against the sums of the GPU's own y (so only the sums' arithmetic is
    // compared), in f32: 2e-3 relative + 1e-2 absolute for sums of ~400-1600 terms of size ~0.3
    // whose order differs (and, for bf16, which the epilogue may take before y's rounding).
    Tensor x = randn(l.x(), gx).to(pr.dtype).to(gpu), w = weights(l.w(), 22).to(pr.dtype).to(gpu);
    ops::ConvGenstats out = ops::conv2d_genstats(x, w, l.p());
    Tensor yc = out.y.to(Device::cpu()).to(DType::F32);
    const Tolerance stol{2e-3, 1e-2, "f32 sums in another order; bf16: stats of y before or after its rounding"};
    CHECK(compare("sum", ops::sum_to_trailing(yc, {l.o}), out.stats.sum, stol) == "");
    CHECK(compare("sq_sum", ops::sum_to_trailing(ops::mul(yc, yc), {l.o}), out.stats.sq_sum, stol) == "");
  });
}

TEST_CASE("bn_finalize: the graph's scale, bias, mean, inv_std and running statistics match the CPU reference") {
  REQUIRE(ops::conv_bn_fusion_stats().frontend);
  BackendScope scope(&BackendConfig::conv_bn_fusion, true);
  const Device gpu = Device::cuda(0);
  for (int64_t c : {64, 256, 2048}) {
    CAPTURE(c);
    Generator g(30);
    const int64_t n = 2 * 56 * 56;
    // Sums of n values with mean ~U(-1, 1) and variance ~U(0.5, 1.5) per channel.
    Tensor mean = ops::add_scalar(ops::scale(rand({c}, g), 2.f), -1.f), var = ops::add_scalar(rand({c}, g), 0.5f);
    ops::ChannelStats st;
    st.count = n;
    st.sum = ops::scale(mean, static_cast<float>(n));
    st.sq_sum = ops::scale(ops::add(var, ops::mul(mean, mean)), static_cast<float>(n));
    Tensor weight = ops::add_scalar(rand({c}, g), 0.5f), bias = randn({c}, g);
    Tensor rm = randn({c}, g), rv = ops::add_scalar(rand({c}, g), 0.5f);
    Tensor rm_gpu = rm.to(gpu), rv_gpu = rv.to(gpu);
    ops::BnFinalized ref = ops::bn_finalize(st, weight, bias, rm, rv, 0.1, 1e-5);
    ops::ChannelStats sg{st.sum.to(gpu), st.sq_sum.to(gpu), n};
    const ops::ConvBnFusionStats before = ops::conv_bn_fusion_stats();
    ops::BnFinalized got = ops::bn_finalize(sg, weight.to(gpu), bias.to(gpu), rm_gpu, rv_gpu, 0.1, 1e-5);
    const ops::ConvBnFusionStats after = ops::conv_bn_fusion_stats();
    CHECK(after.fused - before.fused == 1);
    const Tolerance tol{1e-4, 1e-5, "f32 arithmetic in another order (sq_sum / n - mean^2 cancels ~1 digit)"};
    CHECK(compare("scale", ref.scale, got.scale, tol) == "");
    CHECK(compare("bias", ref.bias, got.bias, tol) == "");
    CHECK(compare("mean", ref.mean, got.mean, tol) == "");
    CHECK(compare("inv_std", ref.inv_std, got.inv_std, tol) == "");
    CHECK(compare("running_mean", rm, rm_gpu, tol) == "");
    CHECK(compare("running_var (unbiased, momentum 0.1)", rv, rv_gpu, tol) == "");
  }
}

TEST_CASE("conv2d_genstats -> bn_finalize -> batch_norm_apply on the GPU matches the CPU chain, forward and backward") {
  // BN bias +-3 and weight 0.5: |xhat * 0.5| < 3 always (xhat is a normalised value), so the ReLU
  // mask has the bias's sign on both backends, as in the conv + bias + ReLU test above. The running
  // stats are not tracked here, so bn_finalize takes its tensor ops: the counters see genstats only.
  const Layer layers[] = {kResnetLayers[1], kResnetLayers[2]};
  for_each_conv_bn_case(layers, [](const Run& pr, const Layer& l) {
    auto chain = [&](const std::vector<Tensor>& in) {
      // The BN parameters stay f32 for every activation dtype, as BatchNorm2d keeps them.
      Tensor weight = ops::cast(in[2], DType::F32), bias = ops::cast(in[3], DType::F32), none;
      ops::ConvGenstats cs = ops::conv2d_genstats(in[0], in[1], l.p());
      ops::BnFinalized fin = ops::bn_finalize(cs.stats, weight, bias, none, none);
      return std::vector<Tensor>{ops::batch_norm_apply(cs.y, fin, weight, bias, true)};
    };
    Generator gx(40);
    CHECK(parity_check(chain, {randn(l.x(), gx), weights(l.w(), 41), Tensor::full({l.o}, 0.5), signed_bias(l.o)},
                       pr.dtype, pr.tol()) == "");
  });
}

namespace {
// Two consecutive convs of a ResNet-50 bottleneck: the second's prologue applies the BN + ReLU of
// the first's output (conv2d_bn_relu_genstats). Batch 2, spatial size cut for the CPU reference.
struct ConvPair {
  const char* name;
  Layer first, second;  // second.c == first.o, second.hw == first's output size
};
const ConvPair kResnetPairs[] = {
    {"1x1 -> 3x3 (64)", {"", 14, 64, 64, 1, 1, 0}, {"", 14, 64, 64, 3, 1, 1}},
    {"3x3 -> 1x1 (64 -> 256)", {"", 14, 64, 64, 3, 1, 1}, {"", 14, 64, 256, 1, 1, 0}},
    {"1x1 -> 3x3/2 (256 -> 128)", {"", 14, 256, 128, 1, 1, 0}, {"", 14, 128, 128, 3, 2, 1}},
    {"3x3 -> 1x1 (512 -> 2048) at 7x7", {"", 7, 512, 512, 3, 1, 1}, {"", 7, 512, 2048, 1, 1, 0}},
};
// conv -> BN (statistics from the conv) -> ReLU in the next conv's prologue -> y2 and its sums.
// Inputs: x, w1, BN weight, BN bias (f32 for every activation dtype, as BatchNorm2d keeps them), w2.
ops::ConvGenstats prologue_chain(const ConvPair& pair, const std::vector<Tensor>& in) {
  Tensor weight = ops::cast(in[2], DType::F32), bias = ops::cast(in[3], DType::F32), none;
  ops::ConvGenstats cs = ops::conv2d_genstats(in[0], in[1], pair.first.p());
  ops::BnFinalized fin = ops::bn_finalize(cs.stats, weight, bias, none, none);
  return ops::conv2d_bn_relu_genstats({cs.y, fin, weight, bias}, in[4], pair.second.p());
}
}  // namespace

TEST_CASE("conv2d_bn_relu_genstats: the prologue graphs match the CPU, forward, backward, statistics; no fallback") {
  // Forward (the prologue + conv + genstats graph) and backward (the wgrad graph, and the dgrad +
  // ReLU-mask graph, with dbn_weight's BN-backward reductions in bf16): parity_check's gradients;
  // for_each_run's counters require that none of them fell back in bf16 or TF32. BN weight 0.5 and
  // bias +-3, as above: the prologue's ReLU mask has the bias's sign on both backends.
  const Device gpu = Device::cuda(0);
  for_each_conv_bn_case(kResnetPairs, [&](const Run& pr, const ConvPair& pair) {
    auto y_only = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{prologue_chain(pair, in).y}; };
    Generator gx(50);
    std::vector<Tensor> in = {randn(pair.first.x(), gx), weights(pair.first.w(), 51), Tensor::full({pair.first.o}, 0.5),
                              signed_bias(pair.first.o), weights(pair.second.w(), 52)};
    CHECK(parity_check(y_only, in, pr.dtype, pr.tol()) == "");
    // The statistics against the sums of the GPU's own y2, as in the genstats test.
    std::vector<Tensor> on_gpu;
    for (const Tensor& t : in) on_gpu.push_back((t.dim() == 1 ? t : t.to(pr.dtype)).to(gpu));
    ops::ConvGenstats out = prologue_chain(pair, on_gpu);
    Tensor yc = out.y.to(Device::cpu()).to(DType::F32);
    const Tolerance stol{2e-3, 1e-2, "f32 sums in another order; bf16: stats of y before or after its rounding"};
    CHECK(compare("sum", ops::sum_to_trailing(yc, {pair.second.o}), out.stats.sum, stol) == "");
    CHECK(compare("sq_sum", ops::sum_to_trailing(ops::mul(yc, yc), {pair.second.o}), out.stats.sq_sum, stol) == "");
  });
}

TEST_CASE("conv2d_bn_relu_genstats at ResNet-50's full ImageNet shapes: every graph each way, bf16, no fallback") {
  REQUIRE(ops::conv_bn_fusion_stats().frontend);
  BackendScope scope(&BackendConfig::conv_bn_fusion, true);
  const Device gpu = Device::cuda(0);
  // Every (input size, channels, kernel, stride) of a prologue conv in ResNet-50 (conv2 and conv3
  // of each stage; conv2 of the first block of stages 2-4 has stride 2).
  struct Full {
    int64_t hw, c, o, k;
    int stride;
  };
  const Full kFull[] = {{56, 64, 64, 3, 1},   {56, 64, 256, 1, 1},   {56, 128, 128, 3, 2}, {28, 128, 128, 3, 1},
                        {28, 128, 512, 1, 1}, {28, 256, 256, 3, 2},  {14, 256, 256, 3, 1}, {14, 256, 1024, 1, 1},
                        {14, 512, 512, 3, 2}, {7, 512, 512, 3, 1},   {7, 512, 2048, 1, 1}};
  const ops::ConvBnFusionStats before = ops::conv_bn_fusion_stats();
  Generator g(60);
  for (const Full& f : kFull) {
    CAPTURE(f.hw);
    CAPTURE(f.c);
    CAPTURE(f.o);
    CAPTURE(f.k);
    CAPTURE(f.stride);
    Tensor x = randn({8, f.hw, f.hw, f.c}, g).to(DType::BF16).to(gpu);
    Tensor w = weights({f.o, f.k, f.k, f.c}, 61).to(DType::BF16).to(gpu);
    ops::ChannelStats st = ops::conv2d_genstats(x, weights({f.c, 1, 1, f.c}, 62).to(DType::BF16).to(gpu),
                                                conv_params(1, 0, 1, 1)).stats;
    Tensor weight = Tensor::full({f.c}, 0.5).to(gpu), bias = signed_bias(f.c).to(gpu), none;
    for (Tensor* t : {&x, &w, &weight, &bias}) t->set_requires_grad(true);
    ops::BnFinalized fin = ops::bn_finalize(st, weight, bias, none, none);
    const ops::Conv2dParams p = conv_params(f.stride, static_cast<int>(f.k / 2), 1, 1);
    ops::ConvGenstats out = ops::conv2d_bn_relu_genstats({x, fin, weight, bias}, w, p);
    const int64_t oh = (f.hw + 2 * (f.k / 2) - f.k) / f.stride + 1;
    CHECK(out.y.shape() == Shape{8, oh, oh, f.o});
    out.y.backward(Tensor::full(out.y.shape(), 0.01, DType::BF16, gpu));
  }
  const ops::ConvBnFusionStats after = ops::conv_bn_fusion_stats();
  CHECK(after.unfused - before.unfused == 0);
  // Per shape: conv + genstats and the prologue forward, then the prologue's wgrad and its dgrad +
  // ReLU mask + dbn_weight (the statistics' conv ran before x required grad: no backward of its own).
  CHECK(after.fused - before.fused == 4 * static_cast<int64_t>(std::size(kFull)));
}
