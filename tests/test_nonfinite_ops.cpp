// tests/test_nonfinite_ops.cpp: how every op treats NaN and +-inf, against PyTorch's rules, on the
// CPU (tests/gpu_*_parity.cpp hold the CUDA side of the same cases).
//
// The rules (PyTorch 2.x, aten/src/ATen/native): relu is threshold(x, 0, 0) = (x <= 0 ? 0 : x), so
// NaN stays NaN, and its backward is threshold_backward(dy, y, 0) = (y <= 0 ? 0 : dy), so dy passes
// where the output is NaN; max pooling takes a cell when (v > max || isnan(v)), so a NaN in the
// window is the output and the last NaN gets the gradient; dropout multiplies (x * mask * scale),
// so a dropped NaN is still NaN; argmax/topk rank NaN above every number; the exp-sum ops
// (softmax, cross_entropy, layer_norm, batch_norm, sums, averages) spread a NaN to what it feeds.
// Why it matters: an op that turns NaN into a number hides divergence from every later check (a
// ReLU net fed NaN used to give finite logits, and a NaN row used to count as top-1 correct).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/ops/ops.h"
#include "core/threads.h"
#include "layers/layers.h"

using namespace tandem;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

// Element-wise equality that treats NaN == NaN (what "this op propagates NaN" needs).
bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) ? !std::isnan(got[i]) : got[i] != want[i]) return false;
  }
  return true;
}
std::string show(const std::vector<double>& v) {
  std::string s = "[";
  for (double x : v) s += std::to_string(x) + " ";
  return s + "]";
}
#define CHECK_SAME(got, want)                           \
  do {                                                  \
    const std::vector<double> g_ = (got), w_ = (want); \
    INFO("got ", show(g_), " want ", show(w_));         \
    CHECK(same(g_, w_));                                \
  } while (0)

bool any_nan(const std::vector<double>& v) {
  for (double x : v)
    if (std::isnan(x)) return true;
  return false;
}
bool all_nan(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isnan(x)) return false;
  return true;
}

Tensor leaf(const std::vector<double>& v, const Shape& s, DType t = DType::F64) {
  Tensor x = Tensor::from_vector_f64(v, s, t);
  x.set_requires_grad(true);
  return x;
}
}  // namespace

TEST_CASE("relu keeps NaN and inf, and its backward passes dy where the output is NaN") {
  for (DType t : {DType::F64, DType::F32}) {
    CAPTURE(dtype_name(t));
    // The kink stays as it was: relu(0) = 0 with gradient 0 (PyTorch's subgradient).
    Tensor x = leaf({kNaN, -1, 2, 0, kInf, -kInf, -0.0}, {7}, t);
    Tensor y = ops::relu(x);
    CHECK_SAME(y.to_vector_f64(), (std::vector<double>{kNaN, 0, 2, 0, kInf, 0, 0}));
    y.backward(Tensor::from_vector_f64({1, 1, 1, 1, 1, 1, 1}, {7}, t));
    CHECK_SAME(x.grad().to_vector_f64(), (std::vector<double>{1, 0, 1, 0, 1, 0, 0}));

    // relu_ (in place, its backward reads the output): the same values and gradients.
    Tensor x2 = leaf({kNaN, -1, 2, 0, kInf, -kInf, -0.0}, {7}, t);
    Tensor y2 = ops::scale(x2, 1.0f);  // a non-leaf for relu_ to overwrite
    ops::relu_(y2);
    CHECK_SAME(y2.to_vector_f64(), (std::vector<double>{kNaN, 0, 2, 0, kInf, 0, 0}));
    y2.backward(Tensor::from_vector_f64({1, 1, 1, 1, 1, 1, 1}, {7}, t));
    CHECK_SAME(x2.grad().to_vector_f64(), (std::vector<double>{1, 0, 1, 0, 1, 0, 0}));

    // A NaN upstream gradient reaches the input where the output is positive or NaN only.
    Tensor x3 = leaf({-1, 2, kNaN}, {3}, t);
    ops::relu(x3).backward(Tensor::from_vector_f64({kNaN, kNaN, kNaN}, {3}, t));
    CHECK_SAME(x3.grad().to_vector_f64(), (std::vector<double>{0, kNaN, kNaN}));
  }
}

TEST_CASE("batch_norm_add_relu (the CPU's fused path) propagates NaN through its ReLU") {
  // [N=4, C=2]; channel 0 holds a NaN, so its batch mean is NaN and the whole channel is NaN
  // (as in PyTorch); channel 1 stays finite. The residual adds nothing.
  Tensor x = leaf({kNaN, 1, 2, -1, 3, 2, 4, -2}, {4, 2});
  Tensor z = Tensor::zeros({4, 2}, DType::F64);
  Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
  Tensor y = ops::batch_norm_add_relu(x, z, Tensor(), Tensor(), rm, rv, true);
  std::vector<double> v = y.to_vector_f64();
  for (int n = 0; n < 4; ++n) {
    CHECK(std::isnan(v[n * 2]));
    CHECK(std::isfinite(v[n * 2 + 1]));
  }
  CHECK(std::isnan(rm.to_vector_f64()[0]));  // the running stats take the NaN, as PyTorch's do
}

TEST_CASE("max_pool2d: a NaN in the window is the output, and the last NaN gets the gradient") {
  // One image, 2x4, one channel, 2x2 windows with stride 2: windows {0,1,4,5} and {2,3,6,7}.
  //   window 0: 5, NaN / 1, NaN -> NaN; PyTorch's rule (v > max || isnan(v)) moves the argmax to
  //             every NaN it meets, so the last one (cell 5) gets dy.
  //   window 1: -inf everywhere -> -inf, and the first cell (2) gets dy, as PyTorch's initial index.
  Tensor x = leaf({5, kNaN, -kInf, -kInf,  //
                   1, kNaN, -kInf, -kInf},
                  {1, 2, 4, 1});
  ops::Pool2dParams p;  // 2x2, stride 2
  Tensor y = ops::max_pool2d(x, p);
  CHECK_SAME(y.to_vector_f64(), (std::vector<double>{kNaN, -kInf}));
  y.backward(Tensor::from_vector_f64({10, 20}, {1, 1, 2, 1}));
  CHECK_SAME(x.grad().to_vector_f64(), (std::vector<double>{0, 0, 20, 0, 0, 10, 0, 0}));

  // A NaN before a larger number still wins (NaN ranks above every number).
  Tensor x2 = leaf({kNaN, 7, 1, 2}, {1, 2, 2, 1});
  Tensor y2 = ops::max_pool2d(x2, p);
  CHECK(std::isnan(y2.to_vector_f64()[0]));
  y2.backward(Tensor::from_vector_f64({1}, {1, 1, 1, 1}));
  CHECK_SAME(x2.grad().to_vector_f64(), (std::vector<double>{1, 0, 0, 0}));
}

TEST_CASE("avg_pool2d, adaptive and global average pooling spread NaN to the windows that read it") {
  Tensor x = Tensor::from_vector_f64({kNaN, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 4, 1});
  ops::Pool2dParams p;
  CHECK_SAME(ops::avg_pool2d(x, p).to_vector_f64(), (std::vector<double>{kNaN, 4.5}));
  CHECK(all_nan(ops::global_avg_pool(x).to_vector_f64()));
  CHECK_SAME(ops::adaptive_avg_pool2d(x, 1, 2).to_vector_f64(), (std::vector<double>{kNaN, 4.5}));
}

TEST_CASE("dropout multiplies by its mask, so a dropped NaN or inf is NaN, as in PyTorch") {
  // p = 0.5 over 64 values: some are dropped (the mask is fixed by the generator's seed).
  Generator g(5);
  std::vector<double> v(64, kNaN);
  for (size_t i = 0; i < v.size(); i += 2) v[i] = kInf;
  Tensor x = leaf(v, {64});
  Tensor y = ops::dropout(x, 0.5f, true, g);
  std::vector<double> out = y.to_vector_f64();
  for (size_t i = 0; i < out.size(); ++i) {
    CAPTURE(i);
    // kept inf stays inf (times 2); kept or dropped NaN is NaN; dropped inf is inf * 0 = NaN
    CHECK((std::isnan(out[i]) || (i % 2 == 0 && out[i] == kInf)));
  }
  // The backward is the same product: a NaN upstream gradient is NaN everywhere.
  y.backward(Tensor::full({64}, kNaN, DType::F64));
  CHECK(all_nan(x.grad().to_vector_f64()));

  // Finite values are unchanged by the rule: dropped ones are (signed) zeros, kept ones scaled.
  Generator g2(5);
  Tensor f = Tensor::full({64}, -3.0, DType::F64);
  for (double o : ops::dropout(f, 0.5f, true, g2).to_vector_f64()) CHECK((o == 0.0 || o == -6.0));

  // bias_dropout_add uses the same rule.
  Generator g3(5);
  Tensor b = Tensor::zeros({64}, DType::F64), r = Tensor::zeros({64}, DType::F64);
  Tensor y3 = ops::bias_dropout_add(Tensor::full({64}, kNaN, DType::F64), b, r, 0.5f, true, g3);
  CHECK(all_nan(y3.to_vector_f64()));
}

TEST_CASE("topk_correct ranks NaN above every number and breaks ties by index (torch.argmax)") {
  // 3 classes.
  Tensor x = Tensor::from_vector_f64({kNaN, kNaN, kNaN,  // all NaN: class 0 is the argmax
                                      0.5, kNaN, 2.0,    // a NaN outranks the label's 2.0
                                      0.5, kNaN, 2.0,    // ... and is the top-1 when it is the label
                                      1.0, 1.0, 1.0},    // constant logits: class 0 is the argmax
                                     {4, 3}, DType::F32);
  auto count = [&](std::vector<int64_t> labels, int k) {
    return ops::topk_correct(x, Tensor::from_vector_i64(labels, {4}), k);
  };
  CHECK(count({0, 2, 1, 0}, 1) == 3);  // rows 0, 2, 3 (the old rule, "nothing is greater", said 4)
  CHECK(count({1, 2, 1, 1}, 1) == 1);  // row 2 only
  CHECK(count({1, 2, 1, 1}, 2) == 4);  // all-NaN and constant rows: classes 0 and 1 are the top 2
  CHECK(count({2, 2, 0, 2}, 2) == 1);  // row 1 only: its 2.0 is second to the NaN
  CHECK(count({2, 2, 0, 2}, 3) == 4);  // k = C: every row
  // f64 logits and +inf: inf ranks below NaN and above every finite number.
  Tensor xi = Tensor::from_vector_f64({kInf, kNaN, 1.0, kInf, 3.0, 1.0}, {2, 3});
  CHECK(ops::topk_correct(xi, Tensor::from_vector_i64({0, 0}, {2}), 1) == 1);  // row 1 only
  CHECK(ops::topk_correct(xi, Tensor::from_vector_i64({0, 0}, {2}), 2) == 2);
}

TEST_CASE("cross_entropy with a NaN or inf logit gives a NaN loss and NaN gradients for that row only") {
  for (double bad : {kNaN, kInf}) {
    CAPTURE(bad);
    for (float smoothing : {0.0f, 0.1f}) {
      CAPTURE(smoothing);
      Tensor x = leaf({0.1, bad, 0.3, 0.2, 0.4, 0.6}, {2, 3});
      Tensor loss = ops::cross_entropy(x, Tensor::from_vector_i64({0, 2}, {2}), smoothing);
      CHECK(std::isnan(loss.item()));
      loss.backward();
      std::vector<double> g = x.grad().to_vector_f64();
      CHECK(all_nan({g[0], g[1], g[2]}));
      CHECK((std::isfinite(g[3]) && std::isfinite(g[4]) && std::isfinite(g[5])));
    }
  }
}

TEST_CASE("softmax, layer_norm, batch_norm and sums spread a NaN over what it feeds") {
  // scale_mask_softmax: row 0 holds a NaN (all NaN out), row 1 does not.
  Tensor s = ops::scale_mask_softmax(Tensor::from_vector_f64({1, kNaN, 2, 1, 2, 3}, {1, 1, 2, 3}), Tensor(), 1.0f);
  std::vector<double> sv = s.to_vector_f64();
  CHECK(all_nan({sv[0], sv[1], sv[2]}));
  CHECK((std::isfinite(sv[3]) && std::isfinite(sv[4]) && std::isfinite(sv[5])));

  Tensor w = Tensor::ones({3}, DType::F64), b = Tensor::zeros({3}, DType::F64);
  std::vector<double> ln = ops::layer_norm(Tensor::from_vector_f64({1, kNaN, 2, 1, 2, 3}, {2, 3}), w, b).to_vector_f64();
  CHECK(all_nan({ln[0], ln[1], ln[2]}));
  CHECK((std::isfinite(ln[3]) && std::isfinite(ln[4]) && std::isfinite(ln[5])));

  Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
  std::vector<double> bn =
      ops::batch_norm(Tensor::from_vector_f64({kNaN, 1, 2, 2, 3, 4}, {3, 2}), Tensor(), Tensor(), rm, rv, true)
          .to_vector_f64();
  CHECK(all_nan({bn[0], bn[2], bn[4]}));
  CHECK((std::isfinite(bn[1]) && std::isfinite(bn[3]) && std::isfinite(bn[5])));

  CHECK(std::isnan(ops::sum(Tensor::from_vector_f64({1, kNaN}, {2})).item()));
  CHECK(std::isnan(ops::mean(Tensor::from_vector_f64({1, kNaN}, {2})).item()));
}

TEST_CASE("square's backward at +-inf is +-inf, not inf + 0 * inf = NaN") {
  Tensor x = leaf({kInf, -kInf, 3}, {3});
  ops::square(x).backward(Tensor::ones({3}, DType::F64));
  CHECK_SAME(x.grad().to_vector_f64(), (std::vector<double>{kInf, -kInf, 6}));
}

TEST_CASE("a conv -> relu -> max pool -> linear net fed one NaN pixel gives NaN logits and a NaN loss") {
  // Before relu propagated NaN, the NaN pixel's conv outputs became 0 after the ReLU and the
  // logits stayed finite: a diverged model would have kept training and validating.
  Generator gen(3);
  Conv2dOptions co;
  co.padding = 1;
  Sequential net(std::vector<ModulePtr>{std::make_shared<Conv2d>(2, 4, 3, co, &gen), std::make_shared<ReLU>(),
                                        std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                                        std::make_shared<Linear>(4 * 2 * 2, 5, true, &gen)});
  // Two 4x4 RGB-like images with 2 channels; image 0 has one NaN pixel, image 1 is clean.
  std::vector<float> px(2 * 4 * 4 * 2);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<float>((i * 37 % 17) - 8) / 8.0f;
  px[5 * 2 + 1] = std::nanf("");  // image 0, pixel (1, 1), channel 1
  Tensor x = Tensor::from_vector(px, {2, 4, 4, 2});
  Tensor logits = net.forward(x);
  std::vector<double> l = logits.to_vector_f64();
  CHECK(all_nan({l[0], l[1], l[2], l[3], l[4]}));  // every logit of image 0 reads the NaN
  for (int j = 5; j < 10; ++j) CHECK(std::isfinite(l[j]));  // the clean image is untouched
  Tensor loss = ops::cross_entropy(logits, Tensor::from_vector_i64({1, 3}, {2}));
  CHECK(std::isnan(loss.item()));
  loss.backward();
  // The gradients carry the NaN back to the conv weight, where a check on them catches it.
  const auto params = net.named_parameters();
  REQUIRE(!params.empty());
  CHECK(any_nan(params.front().second.grad().to_vector_f64()));
}

TEST_CASE("count_nonfinite / all_finite over a list of mixed dtypes, with holes") {
  // 65504 is f16's largest finite value and 70000 rounds to f16 inf; 1e39 is finite in f64 only.
  // Subnormals and -0 are finite.
  Tensor f32 = Tensor::from_vector_f64({1, -0.0, 1e-40, kNaN, kInf}, {5}, DType::F32);        // 2 bad
  Tensor f64 = Tensor::from_vector_f64({1e39, -kInf, 5e-324}, {3}, DType::F64);             // 1 bad
  Tensor f16 = Tensor::from_vector_f64({65504, 70000, -70000, kNaN, 6e-8}, {5}, DType::F16);  // 3 bad
  Tensor bf16 = Tensor::from_vector_f64({1e38, -kInf, kNaN, 3}, {2, 2}, DType::BF16);        // 2 bad
  Tensor ints = Tensor::from_vector_i64({-1, 0, 7}, {3});  // skipped: integers are always finite
  Tensor empty = Tensor::empty({0, 3});                   // skipped
  const std::vector<Tensor> all{f32, Tensor(), f64, f16, ints, bf16, empty};

  Tensor n = ops::count_nonfinite(all);
  CHECK(n.dtype() == DType::I64);
  CHECK(n.shape() == Shape{1});
  CHECK(n.device() == Device::cpu());
  CHECK(n.to_vector_i64()[0] == 8);
  CHECK_FALSE(ops::all_finite(all));
  CHECK(ops::count_nonfinite({f16}).to_vector_i64()[0] == 3);
  CHECK(ops::count_nonfinite({bf16, bf16}).to_vector_i64()[0] == 4);  // a tensor listed twice counts twice

  // Clean tensors of every dtype, and lists with nothing to count.
  Tensor ok32 = Tensor::from_vector_f64({3.4e38, -3.4e38, 0}, {3}, DType::F32);
  Tensor ok16 = Tensor::from_vector_f64({65504, -65504}, {2}, DType::F16);
  Tensor okb = Tensor::from_vector_f64({3e38, -1}, {2}, DType::BF16);
  CHECK(ops::all_finite({ok32, ok16, okb, f64.slice(2, 3), ints}));
  CHECK(ops::all_finite(ok32));
  CHECK_FALSE(ops::all_finite(f32));
  CHECK(ops::all_finite(std::vector<Tensor>{}));
  CHECK(ops::all_finite({Tensor(), ints, empty}));
  CHECK(ops::count_nonfinite({}, Device::cpu()).to_vector_i64()[0] == 0);

  // A view counts only its own elements (slices of a flat buffer, as gradient bucket views are).
  Tensor flat = Tensor::from_vector_f64({1, kNaN, 2, kInf, 3, 4}, {6}, DType::F32);
  CHECK(ops::count_nonfinite({flat.slice(0, 1), flat.slice(4, 6)}).to_vector_i64()[0] == 0);
  CHECK(ops::count_nonfinite({flat.slice(1, 4)}).to_vector_i64()[0] == 2);

  // Every counted tensor must be on the count's device.
  CHECK_THROWS_WITH_AS(ops::count_nonfinite({f32}, Device::cuda(0)), doctest::Contains("call of their own"), Error);
}

TEST_CASE("count_nonfinite over a model's gradients after a NaN batch, and validation's logits") {
  Generator gen(9);
  Linear fc(3, 2, true, &gen);
  Tensor x = Tensor::from_vector_f64({1, 2, kNaN, 0.5, 0.25, 1}, {2, 3}, DType::F32);
  Tensor logits = fc.forward(x);
  CHECK_FALSE(ops::all_finite(logits));  // what validation asks before it reports an accuracy
  CHECK(ops::count_nonfinite({logits}).to_vector_i64()[0] == 2);  // row 0 only
  ops::cross_entropy(logits, Tensor::from_vector_i64({0, 1}, {2})).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : fc.parameters()) grads.push_back(p.grad());
  CHECK_FALSE(ops::all_finite(grads));
  CHECK(ops::all_finite(fc.parameters()));  // the update has not run: the parameters are clean
}

TEST_CASE("count_nonfinite on a large CPU tensor: the exact count on 1 and 2 threads") {
  // 300,007 elements: above core/ops/common/cpu/parallel.h's threshold and not a multiple of its
  // 64-element blocks. Non-finite values at the ends, at block edges and in between.
  const CpuThreads before = configured_cpu_threads();
  const int64_t n = 300007;
  std::vector<double> v(n, 1.5);
  const std::vector<int64_t> at = {0, 63, 64, 150000, 150001, 200000, n - 1};
  for (size_t k = 0; k < at.size(); ++k)
    v[at[k]] = k % 3 == 0 ? kNaN : (k % 3 == 1 ? kInf : -kInf);
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor t = Tensor::from_vector_f64(v, {n}, dt);
    for (int threads : {1, 2}) {
      set_cpu_threads(CpuThreads{threads, 2, "test"});
      CHECK(ops::count_nonfinite({t, t}).to_vector_i64()[0] == 2 * static_cast<int64_t>(at.size()));
    }
  }
  set_cpu_threads(before.threads > 0 ? before : CpuThreads{1, 1, "test"});
}
