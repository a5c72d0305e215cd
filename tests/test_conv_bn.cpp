// tests/test_conv_bn.cpp: the conv-BN fusion pieces on the CPU (core/ops/conv_bn/conv_bn.h), against
// the ops they stand for:
//   - conv2d_genstats: y is conv2d(x, w) bit for bit with conv2d's gradient (f64 finite
//     differences), and the statistics are y's per-channel sums and sums of squares;
//   - bn_finalize: y * scale + bias equals ops::batch_norm(y) in training mode, and the running
//     statistics come out as batch_norm leaves them (momentum, unbiased variance), in f64 and f32,
//     with and without the affine parameters; the conv -> BN -> ReLU chain built from the pieces
//     equals the composition of today's ops;
//   - conv2d_bn_relu_genstats (the next conv's prologue): with the switch off it is the composition
//     conv2d_genstats(batch_norm_apply(...)); with it on, its one node (the GPU's node, the prologue
//     recomputed in the backward) gives the composition's values, statistics and gradients bit for
//     bit, and f64 finite differences through the statistics of both BNs agree;
//   - ResNet with BackendConfig::conv_bn_fusion on trains as with it off: output, every gradient,
//     running statistics and num_batches_tracked, over two steps, and in eval mode; on, every
//     inner BN + ReLU is a conv prologue (the autograd graph's node names say so).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/ops.h"
#include "layers/models/resnet.h"
#include "tests/support/conv_params.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::conv_params, testing::gradcheck, testing::max_abs_diff, testing::rand_f64;

namespace {

// Per-channel sums of an NHWC tensor, straight from the definition (f64).
void channel_sums(const Tensor& y, std::vector<double>& sum, std::vector<double>& sq) {
  const int64_t c = y.size(-1);
  sum.assign(c, 0.0);
  sq.assign(c, 0.0);
  std::vector<double> v = y.to_vector_f64();
  for (size_t i = 0; i < v.size(); ++i) {
    sum[i % c] += v[i];
    sq[i % c] += v[i] * v[i];
  }
}

// y * scale + bias per channel (broadcast over the leading dims).
Tensor affine(const Tensor& y, const ops::BnFinalized& f) { return ops::add(ops::mul(y, f.scale), f.bias); }

}  // namespace

TEST_CASE("conv2d_genstats: y is conv2d's, the statistics are y's per-channel sums") {
  const ops::Conv2dParams p = conv_params(2, 1, 1, 1);
  Tensor x = rand_f64({2, 7, 6, 3}, 1, -1, 1, false), w = rand_f64({5, 3, 3, 3}, 2, -1, 1, false);
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    CAPTURE(dtype_name(dt));
    ops::ConvGenstats out = ops::conv2d_genstats(x.to(dt), w.to(dt), p);
    Tensor ref = ops::conv2d(x.to(dt), w.to(dt), Tensor(), p);
    CHECK(max_abs_diff(out.y.to_vector_f64(), ref.to_vector_f64()) == 0);
    CHECK(out.stats.count == 2 * 4 * 3);
    CHECK(out.stats.sum.dtype() == (dt == DType::F64 ? DType::F64 : DType::F32));
    std::vector<double> sum, sq;
    channel_sums(out.y, sum, sq);
    const double tol = dt == DType::F64 ? 1e-12 : 1e-4;  // f32 sums of 24 values of size ~2
    CHECK(max_abs_diff(out.stats.sum.to_vector_f64(), sum) <= tol);
    CHECK(max_abs_diff(out.stats.sq_sum.to_vector_f64(), sq) <= tol);
  }
  auto f = [&](const std::vector<Tensor>& in) { return ops::conv2d_genstats(in[0], in[1], p).y; };
  CHECK(gradcheck(f, {rand_f64({2, 7, 6, 3}, 3), rand_f64({5, 3, 3, 3}, 4)}) == "");
}

TEST_CASE("bn_finalize equals batch_norm's training mode: output and running statistics") {
  const double momentum = 0.1, eps = 1e-5;
  Tensor y = rand_f64({3, 4, 5, 6}, 5, -2, 3, false);  // mean != 0: the one-pass variance is exercised
  for (DType dt : {DType::F64, DType::F32}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5;
    for (bool affine_params : {true, false}) {
      CAPTURE(affine_params);
      Tensor yd = y.to(dt);
      Tensor weight = affine_params ? rand_f64({6}, 6, 0.5, 1.5, false).to(dt) : Tensor();
      Tensor bias = affine_params ? rand_f64({6}, 7, -1, 1, false).to(dt) : Tensor();
      Tensor rm1 = rand_f64({6}, 8, -1, 1, false).to(dt), rv1 = rand_f64({6}, 9, 0.5, 2, false).to(dt);
      Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
      Tensor ref = ops::batch_norm(yd, weight, bias, rm1, rv1, true, momentum, eps);

      ops::ChannelStats st;
      st.sum = ops::sum_to_trailing(yd, {6});
      st.sq_sum = ops::sum_to_trailing(ops::mul(yd, yd), {6});
      st.count = 3 * 4 * 5;
      ops::BnFinalized fin = ops::bn_finalize(st, weight, bias, rm2, rv2, momentum, eps);
      CHECK(max_abs_diff(affine(yd, fin).to_vector_f64(), ref.to_vector_f64()) <= tol * 10);
      CHECK(max_abs_diff(rm2.to_vector_f64(), rm1.to_vector_f64()) <= tol);
      CHECK(max_abs_diff(rv2.to_vector_f64(), rv1.to_vector_f64()) <= tol);
      // mean and inv_std as defined
      std::vector<double> sum, sq;
      channel_sums(yd, sum, sq);
      std::vector<double> mean = fin.mean.to_vector_f64(), inv_std = fin.inv_std.to_vector_f64();
      for (size_t c = 0; c < 6; ++c) {
        CHECK(std::fabs(mean[c] - sum[c] / 60) <= tol);
        CHECK(std::fabs(inv_std[c] - 1 / std::sqrt(sq[c] / 60 - (sum[c] / 60) * (sum[c] / 60) + eps)) <= tol * 10);
      }
    }
  }
}

TEST_CASE("conv -> BN -> ReLU from conv2d_genstats and bn_finalize equals the composition of today's ops") {
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = rand_f64({2, 5, 5, 4}, 10, -1, 1, false), w = rand_f64({6, 3, 3, 4}, 11, -1, 1, false);
  Tensor weight = rand_f64({6}, 12, 0.5, 1.5, false), bias = rand_f64({6}, 13, -0.5, 0.5, false);
  Tensor rm1 = Tensor::zeros({6}, DType::F64), rv1 = Tensor::ones({6}, DType::F64);
  Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
  Tensor ref = ops::relu(ops::batch_norm(ops::conv2d(x, w, Tensor(), p), weight, bias, rm1, rv1, true));
  ops::ConvGenstats cs = ops::conv2d_genstats(x, w, p);
  ops::BnFinalized fin = ops::bn_finalize(cs.stats, weight, bias, rm2, rv2);
  Tensor got = ops::relu(affine(cs.y, fin));
  CHECK(max_abs_diff(got.to_vector_f64(), ref.to_vector_f64()) <= 1e-11);
  CHECK(max_abs_diff(rm2.to_vector_f64(), rm1.to_vector_f64()) <= 1e-12);
  CHECK(max_abs_diff(rv2.to_vector_f64(), rv1.to_vector_f64()) <= 1e-12);
}

TEST_CASE("bn_finalize refuses what batch_norm refuses") {
  ops::ChannelStats st{Tensor::ones({3}), Tensor::ones({3}), 1};
  Tensor none;
  CHECK_THROWS_WITH_AS(ops::bn_finalize(st, none, none, none, none), doctest::Contains("more than one value"),
                       Error);
  st.count = 4;
  Tensor wrong = Tensor::ones({4});
  CHECK_THROWS_WITH_AS(ops::bn_finalize(st, wrong, none, none, none), doctest::Contains("must match"), Error);
}

TEST_CASE("conv2d_genstats -> bn_finalize -> batch_norm_apply trains as conv2d -> batch_norm -> relu") {
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  // The fused chain as one function of (x, w, weight, bias); running stats not tracked here.
  auto chain = [&](const std::vector<Tensor>& in, bool relu) {
    ops::ConvGenstats cs = ops::conv2d_genstats(in[0], in[1], p);
    Tensor none;
    ops::BnFinalized fin = ops::bn_finalize(cs.stats, in[2], in[3], none, none);
    return ops::batch_norm_apply(cs.y, fin, in[2], in[3], relu);
  };
  auto composition = [&](const std::vector<Tensor>& in, bool relu) {
    Tensor none;
    Tensor b = ops::batch_norm(ops::conv2d(in[0], in[1], Tensor(), p), in[2], in[3], none, none, true);
    return relu ? ops::relu(b) : b;
  };
  for (bool relu : {true, false}) {
    CAPTURE(relu);
    // Finite differences through the statistics: the backward's d/dy via mean and variance.
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return chain(in, relu); },
                    {rand_f64({2, 4, 4, 3}, 31), rand_f64({4, 3, 3, 3}, 32), rand_f64({4}, 33, 0.5, 1.5),
                     rand_f64({4}, 34)}) == "");
    // And every gradient equal to the composition's.
    std::vector<Tensor> in = {rand_f64({2, 5, 5, 3}, 35), rand_f64({6, 3, 3, 3}, 36), rand_f64({6}, 37, 0.5, 1.5),
                              rand_f64({6}, 38)};
    Tensor g = rand_f64({2, 5, 5, 6}, 39, -1, 1, false);
    auto grads = [&](bool fused) {
      for (Tensor& t : in) t.set_grad(Tensor());
      Tensor out = fused ? chain(in, relu) : composition(in, relu);
      out.backward(g);
      std::vector<double> all = out.to_vector_f64();
      for (Tensor& t : in) {
        std::vector<double> v = t.grad().to_vector_f64();
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    CHECK(max_abs_diff(grads(true), grads(false)) <= 1e-10);
  }
  // Without the affine parameters (weight 1, bias 0).
  auto plain = [&](const std::vector<Tensor>& in) {
    ops::ConvGenstats cs = ops::conv2d_genstats(in[0], in[1], p);
    Tensor none;
    ops::BnFinalized fin = ops::bn_finalize(cs.stats, none, none, none, none);
    return ops::batch_norm_apply(cs.y, fin, none, none, true);
  };
  CHECK(gradcheck(plain, {rand_f64({2, 4, 4, 3}, 40), rand_f64({4, 3, 3, 3}, 41)}) == "");
}

TEST_CASE("batch_norm_apply keeps a bf16 activation bf16 and matches the f32 composition to bf16 rounding") {
  Tensor y = rand_f64({4, 3, 3, 8}, 50, -2, 2, false).to(DType::BF16);
  Tensor weight = rand_f64({8}, 51, 0.5, 1.5, false).to(DType::F32), bias = rand_f64({8}, 52, -1, 1, false).to(DType::F32);
  ops::ChannelStats st{ops::sum_to_trailing(y.to(DType::F32), {8}), ops::sum_to_trailing(ops::square(y.to(DType::F32)), {8}),
                       4 * 3 * 3};
  Tensor none;
  ops::BnFinalized fin = ops::bn_finalize(st, weight, bias, none, none);
  Tensor a = ops::batch_norm_apply(y, fin, weight, bias, true);
  CHECK(a.dtype() == DType::BF16);
  Tensor ref = ops::relu(ops::batch_norm(y, weight, bias, none, none, true));
  CHECK(max_abs_diff(a.to_vector_f64(), ref.to_vector_f64()) <= 3e-2);  // both round to bf16 (2^-8 of values ~3)
}

TEST_CASE("conv2d_bn_relu_genstats: one node with the switch on, the composition's values and gradients") {
  const ops::Conv2dParams p1 = conv_params(1, 1, 1, 1), p2 = conv_params(2, 1, 1, 1);
  // conv -> BN (statistics from the conv) -> ReLU in the next conv's prologue -> its statistics.
  // Inputs: x, w1, the BN's weight and bias, w2; out: y2, then its statistics' sums appended.
  auto chain = [&](const std::vector<Tensor>& in, bool fuse) {
    BackendScope scope(&BackendConfig::conv_bn_fusion, fuse);
    ops::ConvGenstats cs = ops::conv2d_genstats(in[0], in[1], p1);
    Tensor none;
    ops::BnFinalized fin = ops::bn_finalize(cs.stats, in[2], in[3], none, none);
    return ops::conv2d_bn_relu_genstats({cs.y, fin, in[2], in[3]}, in[4], p2);
  };
  auto inputs = [](uint64_t seed, bool grad) {
    return std::vector<Tensor>{rand_f64({2, 5, 6, 3}, seed, -1, 1, grad), rand_f64({4, 3, 3, 3}, seed + 1, -1, 1, grad),
                               rand_f64({4}, seed + 2, 0.5, 1.5, grad), rand_f64({4}, seed + 3, -0.5, 0.5, grad),
                               rand_f64({5, 3, 3, 4}, seed + 4, -1, 1, grad)};
  };
  for (bool fuse : {false, true}) {
    CAPTURE(fuse);
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return chain(in, fuse).y; }, inputs(90, true)) == "");
  }
  // The node against the composition (switch off), values, statistics and every gradient, in f64
  // and f32: the same kernels in the same order, so the same bits.
  for (DType dt : {DType::F64, DType::F32}) {
    CAPTURE(dtype_name(dt));
    std::vector<Tensor> in = inputs(95, false);
    for (Tensor& t : in) t = t.to(dt).set_requires_grad(true);
    Tensor g = rand_f64({2, 3, 3, 5}, 100, -1, 1, false).to(dt);
    auto run = [&](bool fuse) {
      for (Tensor& t : in) t.set_grad(Tensor());
      ops::ConvGenstats out = chain(in, fuse);
      out.y.backward(g);
      std::vector<double> all = out.y.to_vector_f64();
      for (const Tensor& t : {out.stats.sum, out.stats.sq_sum}) {
        std::vector<double> v = t.to_vector_f64();
        all.insert(all.end(), v.begin(), v.end());
      }
      CHECK(out.stats.count == 2 * 3 * 3);
      for (Tensor& t : in) {
        std::vector<double> v = t.grad().to_vector_f64();
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    std::vector<double> node = run(true), composition = run(false);
    REQUIRE(node.size() == composition.size());
    CHECK(max_abs_diff(node, composition) == 0);
  }
  // And the values against conv2d(relu(batch_norm(conv2d(x, w1))), w2) from today's ops.
  std::vector<Tensor> in = inputs(96, false);
  Tensor none;
  Tensor h = ops::relu(ops::batch_norm(ops::conv2d(in[0], in[1], none, p1), in[2], in[3], none, none, true));
  Tensor ref = ops::conv2d(h, in[4], none, p2);
  ops::ConvGenstats got = chain(in, true);
  CHECK(max_abs_diff(got.y.to_vector_f64(), ref.to_vector_f64()) <= 1e-11);
  std::vector<double> sum, sq;
  channel_sums(got.y, sum, sq);
  CHECK(max_abs_diff(got.stats.sum.to_vector_f64(), sum) <= 1e-11);
  CHECK(max_abs_diff(got.stats.sq_sum.to_vector_f64(), sq) <= 1e-11);
}

TEST_CASE("conv2d_bn_relu_genstats refuses BN terms that do not match its input") {
  Tensor x = rand_f64({2, 4, 4, 3}, 110, -1, 1, false), w = rand_f64({4, 3, 3, 3}, 111, -1, 1, false);
  ops::ChannelStats st{Tensor::ones({2}, DType::F64), Tensor::full({2}, 2.0, DType::F64, Device::cpu()), 8};
  Tensor none;
  ops::BnFinalized fin = ops::bn_finalize(st, none, none, none, none);  // 2 channels, x has 3
  CHECK_THROWS_WITH_AS(ops::conv2d_bn_relu_genstats({x, fin, none, none}, w, conv_params(1, 1, 1, 1)),
                       doctest::Contains("needs bn_finalize's per-channel terms"), Error);
}

TEST_CASE("ResNet with conv_bn_fusion on: output, gradients, running stats and batch counts as with it off (f64)") {
  // f64, so that the comparison is about the wiring: in f32 the one-pass variance of the sums
  // (conv_bn.h) differs from batch_norm's by rounding that a deep backward amplifies (~1 % on
  // resnet18's largest gradients at 4 x 64 x 64, measured while writing this test).
  for (int depth : {18, 50}) {
    CAPTURE(depth);
    // Two training steps (forward + backward, gradients reset between) and one eval forward, as
    // one list, for a model built from the same seed.
    auto run = [&](bool fuse) {
      BackendScope scope(&BackendConfig::conv_bn_fusion, fuse);
      models::ResNet net(models::resnet_config(depth, 10), 7);
      net.to(DType::F64);
      std::vector<double> all;
      auto append = [&](const Tensor& t) {
        std::vector<double> v = t.to_vector_f64();
        all.insert(all.end(), v.begin(), v.end());
      };
      for (int step = 0; step < 2; ++step) {
        Tensor x = rand_f64({2, 64, 64, 3}, 60 + step, -1, 1, false);
        for (Tensor p : net.parameters()) p.set_grad(Tensor());
        Tensor out = net(x);
        out.backward(rand_f64(out.shape(), 70 + step, -1, 1, false));
        append(out);
        for (const Tensor& p : net.parameters()) append(p.grad());
      }
      for (const auto& [name, b] : net.named_buffers()) append(b);  // running stats, num_batches_tracked
      net.eval();
      append(net(rand_f64({2, 64, 64, 3}, 80, -1, 1, false)));
      return all;
    };
    std::vector<double> fused = run(true), plain = run(false);
    REQUIRE(fused.size() == plain.size());
    double worst = 0;
    for (size_t i = 0; i < fused.size(); ++i)
      worst = std::max(worst, std::fabs(fused[i] - plain[i]) / (1.0 + std::fabs(plain[i])));
    CHECK(worst < 1e-8);
    CHECK(worst > 0);  // the fused path did run: sums and batch_norm's passes round differently
  }
}

TEST_CASE("ResNet with conv_bn_fusion on: every inner BN's ReLU runs in the next conv's prologue") {
  // The autograd graph of one training forward, by node name: on, each block's inner BNs are
  // BnReluConv2dGenstatsBackward nodes (none of their outputs is made), and only the stem (a
  // maxpool follows) keeps BatchNormApplyBackward; off, neither exists.
  auto node_counts = [](const Tensor& out) {
    std::map<std::string, int> counts;
    std::set<const autograd::Node*> seen;
    std::vector<std::shared_ptr<autograd::Node>> todo{out.grad_fn()};
    while (!todo.empty()) {
      std::shared_ptr<autograd::Node> n = todo.back();
      todo.pop_back();
      if (!n || !seen.insert(n.get()).second) continue;
      ++counts[n->name()];
      for (const autograd::Edge& e : n->next_edges) todo.push_back(e.fn);
    }
    return counts;
  };
  for (int depth : {18, 50}) {
    CAPTURE(depth);
    const int inner = depth == 18 ? 8 * 1 : 16 * 2;  // blocks x inner BNs per block
    for (bool fuse : {false, true}) {
      CAPTURE(fuse);
      BackendScope scope(&BackendConfig::conv_bn_fusion, fuse);
      models::ResNet net(models::resnet_config(depth, 10), 7);
      net.to(DType::F64);
      std::map<std::string, int> counts = node_counts(net(rand_f64({2, 32, 32, 3}, 120, -1, 1, false)));
      CHECK(counts["BnReluConv2dGenstatsBackward"] == (fuse ? inner : 0));
      CHECK(counts["BatchNormApplyBackward"] == (fuse ? 1 : 0));
    }
  }
}
