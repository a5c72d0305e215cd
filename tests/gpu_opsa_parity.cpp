// tests/gpu_opsa_parity.cpp: CPU vs CUDA parity for batch_norm (and ResNet's blocks, whose tail is
// the fused BN+add+ReLU), pooling, dropout (and the fused bias_dropout_add) and the shape ops,
// forward and backward, in f32, bf16 and f16 (tests/support/parity.h). Exits 77 without a GPU.
//
// The parity harness rounds inputs to the dtype on both sides, so differences come only from the
// GPU's arithmetic and from rounding its outputs/gradients to 16 bits. Each tolerance below says
// which of those dominates.
#include <doctest/doctest.h>

#include <cmath>

#include <cstdio>
#include <cstdlib>

#include "core/backend.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/models/resnet.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {

Tensor randn_cpu(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g);
}

// Pure data movement / selection (max pool forward, concat, transpose, reshape): the GPU returns
// the very same (rounded) input values, so only exact equality is right.
Tolerance exact(DType) { return {0.0, 0.0, "pure data movement or selection: values must match bit for bit"}; }

// Short sums and one division or scaling per output, computed in f32 on both sides and rounded
// once to the output dtype: one rounding of the dtype (bf16 2^-8, f16 2^-10 relative, with slack
// for values near a rounding boundary), or f32 summation-order noise.
const PerDtype rounding{
    .f32 = {1e-5, 1e-6, "f32 summation order differs (gather on GPU, scatter on CPU)"},
    .bf16 = {1e-2, 1e-3, "one bf16 rounding of the output (2^-8 relative) after f32 math"},
    .f16 = {2e-3, 1e-4, "one f16 rounding of the output (2^-10 relative) after f32 math"}};

// Batch norm: the training backward subtracts two per-channel means from dy, so outputs near zero
// carry an absolute error of a few roundings of O(1) terms; weight/bias gradients are sums over
// all rows (O(sqrt(M)) magnitude) rounded to the dtype of the (16-bit) weight leaf.
const PerDtype batchnorm{
    .f32 = {1e-4, 2e-5, "f32 Welford statistics on GPU vs f64 two-pass on CPU; cancellation in dx"},
    .bf16 = {2e-2, 2e-2, "bf16 rounding of O(1) outputs and of row-sum gradients; cancellation in dx"},
    .f16 = {4e-3, 4e-3, "f16 rounding of O(1) outputs and of row-sum gradients; cancellation in dx"}};

// BN parameters stay f32 whatever the activation dtype; the harness hands every floating input
// over in `dtype`, so widen weight and bias (a differentiable cast, identity on the CPU side).
Tensor param(const Tensor& t) { return ops::cast(t, DType::F32); }

Tensor channel_values(const std::vector<float>& v, Device d) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F32, d); }

// Picks the CUDA BatchNorm (BackendConfig::cudnn_batchnorm; cuDNN by default) for one scope and
// restores the previous choice, so each test says which implementation it checks.
struct BnPath {
  BackendScope scope;
  explicit BnPath(bool cudnn) : scope(&BackendConfig::cudnn_batchnorm, cudnn) {}
};

}  // namespace

TEST_CASE("batch_norm training: output, running statistics and gradients, both layouts") {
  BnPath kernels(false);  // tandem's own kernels, the reference for the cuDNN path below
  for (DType dt : kDtypes)
    for (Shape shape : {Shape{2, 3, 3, 5}, Shape{7, 5}}) {
      INFO(dtype_name(dt), " ", shape_str(shape));
      auto f = [](const std::vector<Tensor>& in) {
        Device d = in[0].device();
        Tensor rm = channel_values({0.1f, -0.2f, 0.3f, 0.0f, 0.5f}, d), rv = channel_values({1.0f, 0.5f, 2.0f, 1.5f, 0.8f}, d);
        Tensor y = ops::batch_norm(in[0], param(in[1]), param(in[2]), rm, rv, true, 0.1, 1e-5);
        return std::vector<Tensor>{y, rm, rv};  // running stats compared as plain outputs
      };
      CHECK(parity_check(f, {randn_cpu(shape, 1), randn_cpu({5}, 2), randn_cpu({5}, 3)}, dt, batchnorm(dt)) == "");
    }
}

TEST_CASE("batch_norm training through cuDNN's NHWC batch norm (BackendConfig::cudnn_batchnorm)") {
  // Same checks as above with the cuDNN path on; shapes with C = 8 and 64 as well, since cuDNN's
  // persistent NHWC kernels specialise on channel counts. A problem cuDNN rejects falls back to
  // the hand-written kernels, which pass the same tolerances. Same tolerance reasons as above.
  BnPath cudnn(true);
  for (DType dt : kDtypes)
    for (Shape shape : {Shape{2, 3, 3, 5}, Shape{7, 5}, Shape{4, 6, 6, 8}, Shape{8, 4, 4, 64}}) {
      INFO(dtype_name(dt), " ", shape_str(shape));
      const int64_t C = shape.back();
      auto f = [C](const std::vector<Tensor>& in) {
        Device d = in[0].device();
        Tensor rm = Tensor::full({C}, 0.1, DType::F32, d), rv = Tensor::full({C}, 0.7, DType::F32, d);
        Tensor y = ops::batch_norm(in[0], param(in[1]), param(in[2]), rm, rv, true, 0.1, 1e-5);
        return std::vector<Tensor>{y, rm, rv};
      };
      CHECK(parity_check(f, {randn_cpu(shape, 7), randn_cpu({C}, 8), randn_cpu({C}, 9)}, dt, batchnorm(dt)) == "");
    }
}

TEST_CASE("batch_norm_add_relu: composed and cuDNN-fused paths against the CPU composition") {
  // The residual add and the ReLU add one rounding of the output at most; the BN tolerance above
  // covers it. ReLU's mask can differ only where bn(x) + z rounds to the other side of 0, which
  // these random inputs do not hit. Shapes with C = 8 and 64: cuDNN's fused NHWC kernels
  // specialise on channel counts; a problem it rejects runs the composition.
  for (bool use_cudnn : {false, true}) {
    BnPath path(use_cudnn);
    for (DType dt : kDtypes)
      for (Shape shape : {Shape{2, 3, 3, 5}, Shape{4, 6, 6, 8}, Shape{8, 4, 4, 64}}) {
        const char* path = use_cudnn ? "cuDNN" : "kernels";
        INFO(path, " ", dtype_name(dt), " ", shape_str(shape));
        const int64_t C = shape.back();
        auto f = [C](const std::vector<Tensor>& in) {
          Device d = in[0].device();
          Tensor rm = Tensor::full({C}, 0.1, DType::F32, d), rv = Tensor::full({C}, 0.7, DType::F32, d);
          Tensor y = ops::batch_norm_add_relu(in[0], in[1], param(in[2]), param(in[3]), rm, rv, true, 0.1, 1e-5);
          return std::vector<Tensor>{y, rm, rv};
        };
        // Keep bn(x) + z away from ReLU's kink: a 16-bit rounding may move a pre-activation within
        // ~0.02 of 0 to the other side, and then one element's output and gradients differ by O(1)
        // (the first H100 run hit exactly that: 1 of 8192 in bf16). Residuals whose sum lands within
        // 0.1 of 0 in f32 are pushed 0.2 further, as Caffe's gradient checks step over kinks.
        Tensor x = randn_cpu(shape, 11), z = randn_cpu(shape, 12), w = randn_cpu({C}, 13), b = randn_cpu({C}, 14);
        {
          Tensor rm = Tensor::full({C}, 0.1, DType::F32, Device::cpu()), rv = Tensor::full({C}, 0.7, DType::F32, Device::cpu());
          std::vector<float> pre = ops::add(ops::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5), z).to_vector();
          std::vector<float> zv = z.to_vector();
          for (size_t i = 0; i < zv.size(); ++i)
            if (std::fabs(pre[i]) < 0.1f) zv[i] += pre[i] >= 0 ? 0.2f : -0.2f;
          z = Tensor::from_vector(zv, shape);
        }
        CHECK(parity_check(f, {x, z, w, b}, dt, batchnorm(dt)) == "");
      }
  }
}

TEST_CASE("batch_norm eval: output and gradients") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    auto f = [](const std::vector<Tensor>& in) {
      Device d = in[0].device();
      Tensor rm = channel_values({0.1f, -0.2f, 0.3f, 0.0f}, d), rv = channel_values({1.0f, 0.5f, 2.0f, 1.5f}, d);
      return std::vector<Tensor>{ops::batch_norm(in[0], param(in[1]), param(in[2]), rm, rv, false)};
    };
    CHECK(parity_check(f, {randn_cpu({2, 2, 3, 4}, 4), randn_cpu({4}, 5), randn_cpu({4}, 6)}, dt, batchnorm(dt)) == "");
  }
}

TEST_CASE("max_pool2d: overlapping windows (3/2/1) and ceil_mode") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    // Forward is a selection (exact); backward sums at most a few dy values per cell, in f32.
    // Ties from 16-bit rounding are fine: both backends take the first maximum.
    for (ops::Pool2dParams p : {ops::Pool2dParams{3, 3, 2, 2, 1, 1, false}, ops::Pool2dParams{3, 3, 2, 2, 1, 1, true}}) {
      auto f = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::max_pool2d(in[0], p)}; };
      CHECK(parity_check(f, {randn_cpu({2, 6, 7, 5}, 7)}, dt, rounding(dt)) == "");
    }
  }
}

// The CUDA kernels move V channels per thread, V the widest power of two up to 16 bytes that
// divides C: C = 64 (V = 8 in 16-bit, 4 in f32: ResNet's stem), 12 (V = 4), 6 (V = 2), 5 (V = 1).
// Backward gathers each input cell's dy from the covering windows' saved argmax: the 3x3/2/1 stem
// geometry (up to 4 covering windows), 2x2/2 (exactly one) and 3x3/1 (up to 9, every cell shared).
TEST_CASE("max_pool2d and avg_pool2d: every channel-group width, the stem geometry, forward and backward") {
  const ops::Pool2dParams stem{3, 3, 2, 2, 1, 1, false}, pairs{2, 2, 2, 2, 0, 0, false},
      dense{3, 3, 1, 1, 1, 1, false};
  for (DType dt : kDtypes) {
    for (int64_t c : {64, 12, 6, 5}) {
      for (ops::Pool2dParams p : {stem, pairs, dense}) {
        INFO(dtype_name(dt), " C=", c, " kernel ", p.kernel_h, " stride ", p.stride_h);
        auto mx = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::max_pool2d(in[0], p)}; };
        CHECK(parity_check(mx, {randn_cpu({2, 9, 10, c}, 31 + c)}, dt, rounding(dt)) == "");
        auto av = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::avg_pool2d(in[0], p)}; };
        CHECK(parity_check(av, {randn_cpu({2, 9, 10, c}, 41 + c)}, dt, rounding(dt)) == "");
      }
    }
  }
}

TEST_CASE("avg_pool2d with padding, ceil_mode, count_include_pad on and off") {
  for (DType dt : kDtypes)
    for (bool include : {true, false}) {
      INFO(dtype_name(dt), " count_include_pad=", include);
      ops::Pool2dParams p{3, 3, 2, 2, 1, 1, true, include};
      auto f = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::avg_pool2d(in[0], p)}; };
      CHECK(parity_check(f, {randn_cpu({2, 5, 6, 3}, 8)}, dt, rounding(dt)) == "");
    }
}

TEST_CASE("adaptive_avg_pool2d shrinking and growing, global_avg_pool") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    for (auto [oh, ow] : {std::pair{3, 2}, std::pair{7, 7}}) {
      auto f = [oh, ow](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::adaptive_avg_pool2d(in[0], oh, ow)}; };
      CHECK(parity_check(f, {randn_cpu({2, 5, 4, 3}, 9)}, dt, rounding(dt)) == "");
      CHECK(parity_check(f, {randn_cpu({1, 2, 2, 3}, 10)}, dt, rounding(dt)) == "");
    }
    auto g = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::global_avg_pool(in[0])}; };
    CHECK(parity_check(g, {randn_cpu({2, 4, 5, 6}, 11)}, dt, rounding(dt)) == "");
  }
}

TEST_CASE("dropout: the same generator state gives the same mask on both backends") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    auto f = [](const std::vector<Tensor>& in) {
      Generator g(1234);
      g.advance(77);  // a non-zero offset, as after earlier draws
      return std::vector<Tensor>{ops::dropout(in[0], 0.3f, true, g)};
    };
    // Kept values are x / (1 - p): one scaling in f32, one rounding to the dtype.
    CHECK(parity_check(f, {randn_cpu({4, 33}, 12)}, dt, rounding(dt)) == "");
    // The tolerance could hide a mask difference on a tiny |x|, so compare the zero patterns exactly.
    Tensor x = ops::cast_raw(randn_cpu({4, 33}, 13), dt);
    Generator gc(55), gg(55);
    std::vector<float> yc = ops::dropout(ops::cast_raw(x, DType::F32), 0.5f, true, gc).to_vector();
    std::vector<float> yg = ops::dropout(x.to(Device::cuda(0)), 0.5f, true, gg).to_vector();
    REQUIRE(yc.size() == yg.size());
    for (size_t i = 0; i < yc.size(); ++i) CHECK((yc[i] == 0.0f) == (yg[i] == 0.0f));
    CHECK(gc.offset() == gg.offset());
  }
}

TEST_CASE("bias_dropout_add: values, gradients and the mask match the CPU and ops::dropout") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    auto f = [](const std::vector<Tensor>& in) {
      Generator g(4321);
      g.advance(33);
      return std::vector<Tensor>{ops::bias_dropout_add(in[0], in[1], in[2], 0.3f, true, g)};
    };
    // residual + (x + b) / (1 - p) in f32, one rounding; db sums <= 40 rows of masked dy in f32.
    CHECK(parity_check(f, {randn_cpu({5, 8, 16}, 40), randn_cpu({16}, 41), randn_cpu({5, 8, 16}, 42)}, dt, rounding(dt)) ==
          "");
    CHECK(parity_check(f, {randn_cpu({9, 37}, 43), randn_cpu({37}, 44), randn_cpu({9, 37}, 45)}, dt, rounding(dt)) == "");
    // Many rows: the bias gradient takes the multi-chunk partials + ordered finish (32 chunks).
    Tolerance many = rounding(dt);
    many.atol = 2e-3;
    many.why = "bias gradient: f32 column sums of 4096 rows vs double, then one rounding to the dtype";
    CHECK(parity_check(f, {randn_cpu({4096, 64}, 51), randn_cpu({64}, 52), randn_cpu({4096, 64}, 53)}, dt, many) == "");
    auto eval = [](const std::vector<Tensor>& in) {
      Generator g(1);
      return std::vector<Tensor>{ops::bias_dropout_add(in[0], in[1], in[2], 0.3f, false, g)};
    };
    CHECK(parity_check(eval, {randn_cpu({6, 24}, 46), randn_cpu({24}, 47), randn_cpu({6, 24}, 48)}, dt, rounding(dt)) ==
          "");
    // The zero pattern (residual 0) must be the same on the CPU, on the GPU, and for the GPU's
    // unfused dropout(x + b) from the same generator state.
    Tensor x = ops::cast_raw(randn_cpu({12, 40}, 49), dt), b = ops::cast_raw(randn_cpu({40}, 50), dt);
    Tensor zero = Tensor::zeros({12, 40}, dt);
    const Device gpu = Device::cuda(0);
    Generator gc(77), gg(77), gu(77);
    auto f32 = [](const Tensor& t) { return ops::cast_raw(t, DType::F32); };
    std::vector<float> yc = ops::bias_dropout_add(f32(x), f32(b), f32(zero), 0.5f, true, gc).to_vector();
    std::vector<float> yg = ops::bias_dropout_add(x.to(gpu), b.to(gpu), zero.to(gpu), 0.5f, true, gg).to_vector();
    std::vector<float> yu = ops::dropout(ops::add(x.to(gpu), b.to(gpu)), 0.5f, true, gu).to_vector();
    REQUIRE(yc.size() == yg.size());
    for (size_t i = 0; i < yc.size(); ++i) {
      CHECK((yc[i] == 0.0f) == (yg[i] == 0.0f));
      CHECK((yu[i] == 0.0f) == (yg[i] == 0.0f));
    }
    CHECK(gc.offset() == gg.offset());
    CHECK(gu.offset() == gg.offset());
  }
}

TEST_CASE("concat_channels, transpose12, reshape and flatten move data exactly") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    auto cat = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::concat_channels({in[0], in[1], in[2]})}; };
    CHECK(parity_check(cat, {randn_cpu({2, 3, 2, 3}, 14), randn_cpu({2, 3, 2, 1}, 15), randn_cpu({2, 3, 2, 4}, 16)}, dt,
                       exact(dt)) == "");
    auto tr = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::transpose12(in[0])}; };
    CHECK(parity_check(tr, {randn_cpu({2, 3, 4, 5}, 17)}, dt, exact(dt)) == "");
    auto rs = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::reshape(ops::flatten(in[0]), {-1, 4})};
    };
    CHECK(parity_check(rs, {randn_cpu({2, 3, 4}, 18)}, dt, exact(dt)) == "");
  }
}

TEST_CASE("ResNet blocks on the GPU (cuDNN BN, fused BN+add+ReLU tail) against the CPU, f32") {
  // The whole block, as ResNet runs it: BatchNorm2d::forward_relu (inner stages) and
  // forward_add_relu (the tail) take cuDNN's fused paths on the GPU (training mode,
  // BackendConfig::cudnn_batchnorm on) and the compositions on the CPU; the block input's two
  // gradients meet in the first conv's dgrad with beta = 1 on the GPU and in an add on the CPU. Strict f32
  // (no TF32) so the convs agree to summation order; BN's backward cancellation then dominates, as
  // in the batch_norm tolerance above (f32: 1e-4 relative, 2e-5 absolute), with 10x slack for the
  // chain of three ops. ReLU masks can differ only where a pre-activation is within ~1e-6 of 0.
  BackendConfig strict = backend();
  strict.allow_tf32 = false;
  BackendScope no_tf32(strict);
  BnPath cudnn(true);
  auto rand_params = [](Module& m) {
    Generator g(7);
    for (auto& [_, p] : m.named_parameters()) p.detach().copy_(ops::scale(randn(p.shape(), g), 0.3f));
  };
  auto make = [&](bool bottleneck) -> ModulePtr {
    auto ds = std::make_shared<Sequential>();
    Conv2dOptions o;
    o.stride = 2;
    o.bias = false;
    ds->add(std::make_shared<Conv2d>(16, bottleneck ? 32 : 8, 1, o, nullptr));
    ds->add(std::make_shared<BatchNorm2d>(bottleneck ? 32 : 8));
    ModulePtr b = bottleneck ? ModulePtr(std::make_shared<models::Bottleneck>(16, 8, 2, ds))
                             : ModulePtr(std::make_shared<models::BasicBlock>(16, 8, 2, ds));
    rand_params(*b);
    return b;
  };
  auto close = [](const Tensor& gpu, const Tensor& cpu, const char* what) {
    std::vector<float> a = gpu.to(Device::cpu()).to_vector(), b = cpu.to_vector();
    REQUIRE(a.size() == b.size());
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 2e-4 + 1e-3 * std::fabs(b[i])) {
        if (bad++ < 5) std::printf("  %s[%zu]: gpu %.7g cpu %.7g\n", what, i, a[i], b[i]);
      }
    CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", a.size(), " differ");
  };
  for (bool bottleneck : {false, true}) {
    INFO((bottleneck ? "Bottleneck" : "BasicBlock"));
    ModulePtr cpu = make(bottleneck), gpu = make(bottleneck);
    gpu->to(Device::cuda(0));
    Tensor x = randn_cpu({4, 8, 8, 16}, 21).set_requires_grad(true);
    Tensor xg = x.detach().to(Device::cuda(0)).set_requires_grad(true);
    Tensor yc = (*cpu)(x), yg = (*gpu)(xg);
    Tensor up = randn_cpu(yc.shape(), 22);
    ops::sum(ops::mul(yc, up)).backward();
    ops::sum(ops::mul(yg, up.to(Device::cuda(0)))).backward();
    close(yg, yc, "y");
    close(xg.grad(), x.grad(), "dx");
    auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    for (size_t i = 0; i < pc.size(); ++i) close(pg[i].second.grad(), pc[i].second.grad(), pc[i].first.c_str());
    auto bc = cpu->named_buffers(), bg = gpu->named_buffers();
    for (size_t i = 0; i < bc.size(); ++i)
      if (is_floating(bc[i].second.dtype())) close(bg[i].second, bc[i].second, bc[i].first.c_str());
  }
}

// ---- NaN and inf (the rules: tests/test_nonfinite_ops.cpp) ----

namespace {
// randn values with NaN and +-inf planted every `every` cells (two NaNs often share a window).
Tensor planted(const Shape& s, uint64_t seed, int every) {
  std::vector<float> v = randn_cpu(s, seed).to_vector();
  const float bad[] = {NAN, INFINITY, NAN, -INFINITY};
  for (size_t i = 0; i < v.size(); i += every) v[i] = bad[(i / every) % 4];
  return Tensor::from_vector(v, s);
}
Tolerance nonfinite(Tolerance t) {
  t.nonfinite_equal = true;
  return t;
}
}  // namespace

TEST_CASE("max_pool2d with NaN and inf: the same outputs and the same winning cells on both backends") {
  // Every NaN takes its window (pool::max_takes on both backends), so the last NaN gets dy; a
  // different winner would show up as a gradient in another cell.
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    for (ops::Pool2dParams p : {ops::Pool2dParams{3, 3, 2, 2, 1, 1, false}, ops::Pool2dParams{2, 2, 2, 2, 0, 0, false}}) {
      auto f = [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::max_pool2d(in[0], p)}; };
      CHECK(parity_check(f, {planted({2, 6, 7, 5}, 23, 11)}, dt, nonfinite(rounding(dt))) == "");
      // C = 16: the vectorised kernel (every channel of a group keeps its own winner and NaN rule).
      CHECK(parity_check(f, {planted({2, 6, 7, 16}, 28, 13)}, dt, nonfinite(rounding(dt))) == "");
    }
  }
}

TEST_CASE("dropout and bias_dropout_add with NaN and inf: a dropped NaN or inf is NaN on both backends") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    auto drop = [](const std::vector<Tensor>& in) {
      Generator g(99);
      return std::vector<Tensor>{ops::dropout(in[0], 0.5f, true, g)};
    };
    CHECK(parity_check(drop, {planted({4, 33}, 24, 3)}, dt, nonfinite(rounding(dt))) == "");
    auto fused = [](const std::vector<Tensor>& in) {
      Generator g(98);
      return std::vector<Tensor>{ops::bias_dropout_add(in[0], in[1], in[2], 0.5f, true, g)};
    };
    CHECK(parity_check(fused, {planted({6, 16}, 25, 5), randn_cpu({16}, 26), randn_cpu({6, 16}, 27)}, dt,
                       nonfinite(rounding(dt))) == "");
  }
}

TEST_CASE("batch_norm and its fused ReLU tails with a NaN: kernels as the CPU; cuDNN keeps the NaN visible") {
  // A NaN in channel 0 makes channel 0's batch statistics, output and running stats NaN (PyTorch
  // too); the other channels stay finite. The kernels path must match the CPU element for element.
  // cuDNN's fused BN+ReLU and BN+add+ReLU propagate NaN in their forward (CUDNN_PROPAGATE_NAN), but
  // their backward takes the ReLU mask from the reserve space, where NaN > 0 is false: it may return
  // 0 where PyTorch's threshold_backward passes dy. So on that path the test asks only what the
  // trainers' checks need: the forward matches, and dx is non-finite exactly where the CPU's is.
  const Shape shape{4, 3, 3, 8};
  const int64_t C = shape.back();
  std::vector<float> xv = randn_cpu(shape, 31).to_vector();
  xv[C * 5] = NAN;  // row 5, channel 0
  const Tensor x = Tensor::from_vector(xv, shape), z = randn_cpu(shape, 32), w = randn_cpu({C}, 33),
               b = randn_cpu({C}, 34);
  // The fused op of `tail` on inputs {x, w, b} (Relu) or {x, z, w, b} (AddRelu).
  auto fused = [C](ops::BatchNormTail tail) {
    return [C, tail](const std::vector<Tensor>& in) {
      Device d = in[0].device();
      Tensor rm = Tensor::full({C}, 0.1, DType::F32, d), rv = Tensor::full({C}, 0.7, DType::F32, d);
      const size_t p = tail == ops::BatchNormTail::AddRelu ? 2 : 1;  // where weight and bias start
      Tensor y = tail == ops::BatchNormTail::AddRelu
                     ? ops::batch_norm_add_relu(in[0], in[1], param(in[p]), param(in[p + 1]), rm, rv, true, 0.1, 1e-5)
                     : ops::batch_norm_relu(in[0], param(in[p]), param(in[p + 1]), rm, rv, true, 0.1, 1e-5);
      return std::vector<Tensor>{y, rm, rv};
    };
  };
  auto inputs = [&](ops::BatchNormTail tail, const Tensor& x_) {
    return tail == ops::BatchNormTail::AddRelu ? std::vector<Tensor>{x_, z, w, b} : std::vector<Tensor>{x_, w, b};
  };
  auto bn = [C](const std::vector<Tensor>& in) {
    Device d = in[0].device();
    Tensor rm = Tensor::full({C}, 0.1, DType::F32, d), rv = Tensor::full({C}, 0.7, DType::F32, d);
    return std::vector<Tensor>{ops::batch_norm(in[0], param(in[1]), param(in[2]), rm, rv, true, 0.1, 1e-5), rm, rv};
  };
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    {
      BnPath kernels(false);
      CHECK(parity_check(bn, {x, w, b}, dt, nonfinite(batchnorm(dt))) == "");
      for (ops::BatchNormTail tail : {ops::BatchNormTail::Relu, ops::BatchNormTail::AddRelu})
        CHECK(parity_check(fused(tail), inputs(tail, x), dt, nonfinite(batchnorm(dt))) == "");
    }
    BnPath cudnn(true);
    CHECK(parity_check(bn, {x, w, b}, dt, nonfinite(batchnorm(dt))) == "");
    const Device gpu = Device::cuda(0);
    for (ops::BatchNormTail tail : {ops::BatchNormTail::Relu, ops::BatchNormTail::AddRelu}) {
      INFO((tail == ops::BatchNormTail::Relu ? "BN+ReLU" : "BN+add+ReLU"));
      Tensor xc = x.detach().set_requires_grad(true), xg = ops::cast_raw(x, dt).to(gpu).set_requires_grad(true);
      std::vector<Tensor> in_g;
      for (const Tensor& t : inputs(tail, xg)) in_g.push_back(t.is_cuda() ? t : ops::cast_raw(t, dt).to(gpu));
      const std::vector<Tensor> yc = fused(tail)(inputs(tail, xc)), yg = fused(tail)(in_g);
      CHECK(compare_values("fused forward", yc[0].to_vector(), yg[0].to_vector(), nonfinite(batchnorm(dt))) == "");
      yc[0].backward(Tensor::ones(shape));
      yg[0].backward(Tensor::ones(shape, dt, gpu));
      REQUIRE(xg.grad().defined());
      CHECK(ops::count_nonfinite({xg.grad()}).to_vector_i64() == ops::count_nonfinite({xc.grad()}).to_vector_i64());
      CHECK_FALSE(ops::all_finite(xc.grad()));
    }
  }
}
