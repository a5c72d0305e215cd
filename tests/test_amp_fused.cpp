// tests/test_amp_fused.cpp: the AMP step without per-use casts (issue 17.2, 17.4) on the CPU.
//   - every optimizer's fused 16-bit copy (ParamSegment::low) equals "update, then round to nearest
//     even" bit for bit: SGD (momentum, nesterov), AdamW, LAMB; bf16 and f16; whole parameters and
//     1-D range views (ZeRO's shards); a device-skipped step writes neither;
//   - the launch counters (core/ops/copy/launch_count.h): an AMP bf16 step of a small BERT encoder
//     launches no weight cast and no f32 GEMM, and its counts are what the GPU step would launch;
//   - LaunchCounter's snapshot arithmetic.
// The CUDA kernels' side of the fused copy is tests/gpu_amp_parity.cpp.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/ops/copy/launch_count.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/amp_cast.h"
#include "layers/models/bert.h"
#include "optim/amp.h"
#include "optim/optimizer.h"

using namespace tandem;

namespace {

const DType kLow[] = {DType::BF16, DType::F16};

// Bitwise equality of two tensors of one dtype (NaN-safe, -0 vs +0 distinguished).
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// f32 values that exercise the rounding: ties at the 16-bit precision, tiny and large magnitudes.
Tensor values(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty({n});
  normal_(t, 0.0, 1.0, g);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; i += 7) p[i] = 1.0f + static_cast<float>(i % 3) * 0.00390625f;  // 1 + k * 2^-8
  if (n > 3) p[3] = 6.0e4f, p[1] = 1.0e-6f;
  return t;
}

// An optimizer over f32 segments, optionally with 16-bit copies, stepped `steps` times with the
// same gradients. Returns the segments (masters) so the caller compares.
struct Run {
  std::vector<Tensor> masters, lows;
  std::vector<bool> sliced;  // per segment: a range view (elements [2, n - 1))
  std::unique_ptr<optim::Optimizer> opt;
};

Run make_run(const std::string& kind, const std::vector<Tensor>& init, DType low, bool with_low, bool sliced) {
  Run r;
  std::vector<optim::ParamSegment> segs;
  for (size_t i = 0; i < init.size(); ++i) {
    Tensor m = init[i].clone();
    Tensor l = ops::cast_raw(m, low);
    optim::ParamSegment s;
    s.name = "p" + std::to_string(i);
    s.param_index = static_cast<int64_t>(i);
    if (sliced && m.numel() > 4) {
      // A ZeRO-like shard: elements [2, n - 1) of the flattened parameter, as 1-D views.
      const int64_t n = m.numel();
      s.param = m.view({n}).slice(2, n - 1);
      s.offset = 2;
      s.param_numel = n;
      if (with_low) s.low = l.view({n}).slice(2, n - 1);
    } else {
      s.param = m;
      if (with_low) s.low = l;
    }
    s.grad = Tensor::empty(s.param.shape());
    r.sliced.push_back(s.offset != 0);
    r.masters.push_back(m);
    r.lows.push_back(l);
    segs.push_back(s);
  }
  optim::OptimizerOptions oo;
  oo.lr = 0.01;
  if (kind == "sgd") oo.momentum = 0.9, oo.nesterov = true, oo.weight_decay = 1e-4;
  r.opt = optim::make_optimizer(kind, std::move(segs), static_cast<int64_t>(init.size()), oo);
  return r;
}

void step_with(Run& r, const std::vector<Tensor>& grads, const Tensor& flag = Tensor()) {
  std::vector<Tensor> gs;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const int64_t n = g.numel();
    gs.push_back(r.sliced[i] ? g.view({n}).slice(2, n - 1) : g.view(r.masters[i].shape()));
  }
  r.opt->set_grads(gs);
  if (flag.defined()) r.opt->step(flag);
  else r.opt->step();
}

}  // namespace

TEST_CASE("the fused 16-bit copy equals the update then round-to-nearest-even, bit for bit") {
  const std::vector<Tensor> init = {values(1000, 1).view({40, 25}), values(3, 2), values(77, 3)};
  for (const std::string kind : {"sgd", "adamw", "lamb"})
    for (DType low : kLow)
      for (bool sliced : {false, true}) {
        CAPTURE(kind);
        CAPTURE(std::string(dtype_name(low)));
        CAPTURE(sliced);
        Run fused = make_run(kind, init, low, true, sliced);
        Run plain = make_run(kind, init, low, false, sliced);
        const std::vector<Tensor> untouched = {fused.lows[0].clone(), fused.lows[1].clone(), fused.lows[2].clone()};
        for (int step = 0; step < 3; ++step) {
          std::vector<Tensor> grads;
          for (size_t i = 0; i < init.size(); ++i) grads.push_back(values(init[i].numel(), 10 + step + i));
          step_with(fused, grads);
          step_with(plain, grads);
          for (size_t i = 0; i < init.size(); ++i) {
            CAPTURE(i);
            // The masters are the same computation: the copy must not disturb them.
            REQUIRE(same_bits(fused.masters[i], plain.masters[i]));
            // The copy is the cast of the updated master (over the segment's range when sliced).
            Tensor expect = ops::cast_raw(plain.masters[i], low);
            if (!sliced || init[i].numel() <= 4) {
              CHECK(same_bits(fused.lows[i], expect));
            } else {
              const int64_t n = init[i].numel();
              CHECK(same_bits(fused.lows[i].view({n}).slice(2, n - 1).clone(), expect.view({n}).slice(2, n - 1).clone()));
              // Outside the shard nothing is written (another rank's range).
              CHECK(same_bits(fused.lows[i].view({n}).slice(0, 2).clone(), untouched[i].view({n}).slice(0, 2).clone()));
            }
          }
        }
        // A step skipped on the device (found_inf != 0) writes neither the master nor the copy.
        const std::vector<Tensor> before = {fused.lows[0].clone(), fused.lows[1].clone(), fused.lows[2].clone()};
        const Tensor m0 = fused.masters[0].clone();
        std::vector<Tensor> grads;
        for (size_t i = 0; i < init.size(); ++i) grads.push_back(values(init[i].numel(), 99 + i));
        step_with(fused, grads, Tensor::from_vector({1.0f}, {1}));
        CHECK(same_bits(fused.masters[0], m0));
        for (size_t i = 0; i < init.size(); ++i) CHECK(same_bits(fused.lows[i], before[i]));
      }
}

TEST_CASE("the optimizer refuses a 16-bit copy that does not match its f32 segment") {
  Tensor m = Tensor::zeros({4});
  optim::ParamSegment s;
  s.name = "w";
  s.param = m;
  s.low = Tensor::zeros({3}, DType::BF16);
  CHECK_THROWS_WITH_AS(optim::make_optimizer("adamw", {s}, 1, {}), doctest::Contains("16-bit copy"), std::exception);
  s.low = Tensor::zeros({4}, DType::F32);
  CHECK_THROWS_WITH_AS(optim::make_optimizer("sgd", {s}, 1, {}), doctest::Contains("16-bit copy"), std::exception);
}

TEST_CASE("LaunchCounter: snapshots subtract per dtype pair, the summary names nonzero pairs") {
  ops::LaunchCounter c;
  const ops::LaunchCounter::Counts zero = c.snapshot();
  CHECK(ops::LaunchCounter::summary(zero) == "none");
  c.add(DType::F32, DType::BF16);
  c.add(DType::F32, DType::BF16);
  c.add(DType::I64, DType::I32);
  const ops::LaunchCounter::Counts d = ops::LaunchCounter::minus(c.snapshot(), zero);
  CHECK(ops::LaunchCounter::total(d) == 3);
  CHECK(ops::LaunchCounter::count(d, DType::F32, DType::BF16) == 2);
  CHECK(ops::LaunchCounter::count(d, DType::BF16, DType::F32) == 0);
  CHECK(c.summary() == "f32->bf16: 2, i64->i32: 1");
  c.reset();
  CHECK(c.total() == 0);
}

namespace {
BertConfig tiny_bert(int64_t vocab) {
  BertConfig c = models::bert_config("bert_tiny", vocab);  // 2 layers, hidden 128: small enough for a CPU test
  c.max_position_embeddings = 16;
  return c;
}

Tensor tokens() { return Tensor::from_vector_i64({5, 1, 7, 9, 1, 3, 1, 6, 8, 1, 2, 4, 1, 11, 12, 13}, {2, 8}); }
Tensor attention_mask() { return Tensor::from_vector_i64({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 8}); }
Tensor mlm_labels() {
  return Tensor::from_vector_i64({-100, 20, -100, -100, 21, -100, 22, -100, -100, 23, -100, -100, 24, -100, -100, -100},
                                 {2, 8});
}
}  // namespace

TEST_CASE("an AMP bf16 step of a BERT encoder launches no weight cast and no f32 GEMM") {
  // vocab 48, a multiple of 8: every 16-bit GEMM keeps tensor-core alignment on the GPU.
  models::BertForMaskedLM m(tiny_bert(48), 7);
  m.train();
  cast_for_amp(m, DType::BF16);
  optim::MasterWeights mw(optim::segments_from_parameters(m.named_parameters()));
  optim::OptimizerOptions oo;
  oo.lr = 1e-3;
  for (const std::string kind : {"adamw", "lamb", "sgd"}) {
    CAPTURE(kind);
    auto opt = optim::make_optimizer(kind, mw.master_segments(), static_cast<int64_t>(mw.size()), oo);
    optim::LossScalerOptions so;
    so.enabled = false;  // bf16
    optim::LossScaler scaler(so);
    const Tensor x = tokens(), mask = attention_mask(), labels = mlm_labels();
    for (int step = 0; step < 2; ++step) {
      const auto casts0 = ops::cast_launches().snapshot(), gemms0 = ops::gemm_launches().snapshot();
      const auto misaligned0 = ops::misaligned_gemm_launches().snapshot();
      opt->zero_grad();
      for (auto& [name, p] : m.named_parameters())
        if (p.grad().defined()) p.grad().fill_(0.0);
      Tensor loss = m.mlm_loss(x, mask, Tensor(), labels);
      loss.backward();
      CHECK(optim::amp_step(mw, scaler, *opt, mw.model_grads()));
      const auto casts = ops::LaunchCounter::minus(ops::cast_launches().snapshot(), casts0);
      const auto gemms = ops::LaunchCounter::minus(ops::gemm_launches().snapshot(), gemms0);
      MESSAGE(kind, " step ", step, ": casts ", ops::LaunchCounter::summary(casts), "; GEMMs ",
              ops::LaunchCounter::summary(gemms));
      // Weights: no cast into 16 bits at all (the update wrote them; the forward reads them).
      CHECK(ops::LaunchCounter::count(casts, DType::F32, DType::BF16) == 0);
      // Every matmul in bf16 (core/autocast.h: linear/matmul Low), none in f32.
      CHECK(ops::LaunchCounter::count(gemms, DType::F32, DType::F32) == 0);
      CHECK(ops::LaunchCounter::count(gemms, DType::BF16, DType::BF16) > 0);
      CHECK(ops::LaunchCounter::total(ops::LaunchCounter::minus(ops::misaligned_gemm_launches().snapshot(),
                                                                 misaligned0)) == 0);
      // The model's 16-bit weights are the rounded masters, bit for bit.
      const auto ms = mw.master_segments();
      for (const auto& s : ms)
        if (s.low.defined()) REQUIRE(same_bits(s.low, ops::cast_raw(s.param, DType::BF16)));
    }
  }
}

TEST_CASE("a vocabulary that is not a multiple of 8 makes the MLM decoder's bf16 GEMMs misaligned for tensor cores") {
  // issue 17.4: bert's 30522-token decoder (30522 % 8 = 2). Vocab 42 here: the decoder's forward,
  // its input gradient and its weight gradient each have a 42-element row; the encoder's do not.
  for (int64_t vocab : {int64_t{42}, int64_t{48}}) {
    CAPTURE(vocab);
    models::BertForMaskedLM m(tiny_bert(vocab), 7);
    cast_for_amp(m, DType::BF16);
    const auto before = ops::misaligned_gemm_launches().snapshot();
    m.mlm_loss(tokens(), attention_mask(), Tensor(), mlm_labels()).backward();
    const int64_t n =
        ops::LaunchCounter::total(ops::LaunchCounter::minus(ops::misaligned_gemm_launches().snapshot(), before));
    CHECK(n == (vocab % 8 == 0 ? 0 : 3));
  }
}
