// tests/gpu_attention_parity.cpp: CPU vs CUDA parity for scale_mask_softmax (with mask, with
// dropout), the reference attention path, cuDNN's fused SDPA (AttentionBackend::Fused, through
// attention_qkv and attention) against the CPU reference at BERT's shapes, its dropout by
// statistics, Auto's choice, the encoder's graph (no head split or transpose on CUDA bf16),
// split_qkv_heads/merge_heads and cross_entropy with ignore_index, in f32, bf16 and f16 (forward
// and every input gradient).
//
// Tolerances (tests/support/parity.h): inputs are rounded to the dtype first, so only arithmetic
// differs.
//   - scale_mask_softmax: the GPU computes in f32 and rounds p once to the dtype -> rounded_once.
//     With dropout the masks are bit-identical (counter RNG) and the scaling is applied to the
//     rounded p on both sides, so the same tolerance holds.
//   - attention: three roundings to the dtype in a row on the GPU (scores, p, output) and the GEMMs
//     accumulate in f32 in another order (and TF32 for f32 unless disabled: it is disabled here),
//     so bf16 gets 3 ulp = 3 * 2^-8 and f16 3 * 2^-11 relative; atol 1e-3 / 2e-4 covers outputs
//     that are sums of +- terms cancelling to near zero (an output is a convex mix of v rows).
//   - the head split/merge only move values: exact (rtol 0).
//   - cuDNN's SDPA on the GPU vs the reference path on the CPU (which rounds scores, p and the
//     output): cuDNN rounds p to the dtype before its P V product and the output once, so the
//     reference's budget plus one more rounding; the backward's dQ, dK are differences
//     (p * (dp - rowsum(dO * O))) where an ulp of the largest term counts (max_rel). These numbers
//     are first estimates (no GPU ran this file's cuDNN cases when it was written): a GPU session
//     that finds them too tight or loose should measure and say so here.
// Exits 77 (Skipped) without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/transformer.h"
#include "tests/support/autograd_graph.h"
#include "tests/support/parity.h"

using namespace tandem;
using namespace tandem::testing::parity_names;

namespace {
const PerDtype rounded_once =
    testing::rounded_once("f32: GPU f32 statistics vs CPU double, different summation order");
// Softmax backward in 16-bit: the GPU saves p rounded to 16 bits, and dx = p * (dy - sum p dy) is a
// difference, so its error is a few ulp of the largest term (max_rel), not of dx itself. Measured
// on an H100 (2026-11-22): element-wise bounds failed on 1-11 of 120-1554 entries whose values had
// cancelled to ~1e-4 while the tensor's largest was ~1e-2.
const PerDtype softmax_backward{
    .f32 = rounded_once(DType::F32),
    .bf16 = {1e-2, 1e-6, "bf16: one rounding (2^-8) of p and of the output; dx cancels", 4 * 0x1p-8},
    .f16 = {2e-3, 1e-6, "f16: one rounding (2^-11) of p and of the output; dx cancels", 4 * 0x1p-11}};
// The reference attention rounds the scores, p and the output (three roundings); the output is a
// p-weighted mean of v (|v| ~ 1), so an ulp of p moves it by ~2^-8 |v| whatever its own size.
const PerDtype three_roundings{
    .f32 = {1e-4, 1e-6, "f32 (TF32 off): GEMM summation order and f32 vs double softmax statistics"},
    .bf16 = {3e-2, 1e-3, "bf16: scores, p and output each rounded (3 ulp of 2^-8), f32 GEMM order", 8 * 0x1p-8},
    .f16 = {6e-3, 2e-4, "f16: scores, p and output each rounded (3 ulp of 2^-11), f32 GEMM order", 8 * 0x1p-11}};
Tensor mask(const std::vector<int64_t>& v, int64_t b, int64_t s) { return Tensor::from_vector_i64(v, {b, s}); }

// attention(q, k, v, mask) with training dropout p on the backend chosen per device; a fresh
// generator per call, so the CPU and the GPU draw the same dropout mask.
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> attention_fn(float p, ops::AttentionBackend on_cpu,
                                                                          ops::AttentionBackend on_gpu) {
  return [=](const std::vector<Tensor>& in) {
    Generator d(9);
    ops::AttentionOptions o;
    o.dropout_p = p;
    o.training = true;
    o.backend = in[0].is_cuda() ? on_gpu : on_cpu;
    return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], in[3], o, d)};
  };
}

// cuDNN vs the CPU reference: the reference's three roundings plus cuDNN's rounding of p before P V.
const PerDtype sdpa_vs_cpu{
    .f32 = {1e-4, 1e-5, "f32: not run (cuDNN's SDPA takes f16/bf16)"},
    .bf16 = {4e-2, 2e-3, "bf16: reference's three roundings plus cuDNN's p and output roundings", 12 * 0x1p-8},
    .f16 = {1e-2, 5e-4, "f16: reference's three roundings plus cuDNN's p and output roundings", 12 * 0x1p-11}};

// BERT's shapes: heads 12 (base) and 16 (large), head dim 64, sequence 128 and 512.
struct BertShape {
  int64_t B, H, S;
};
constexpr BertShape kBertShapes[] = {{2, 12, 128}, {2, 16, 128}, {1, 12, 512}, {1, 16, 512}};
constexpr int64_t kHeadDim = 64;

// Right-padded [B, S]: entry b keeps S - b * S / 3 tokens (the first sequence is full).
Tensor right_padded(int64_t B, int64_t S) {
  std::vector<int64_t> m(static_cast<size_t>(B * S), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < S - b * S / 3; ++j) m[b * S + j] = 1;
  return Tensor::from_vector_i64(m, {B, S});
}

// Options for one attention call that states its mask right-padded.
ops::AttentionOptions padded_options(ops::AttentionBackend backend, float p) {
  ops::AttentionOptions o;
  o.backend = backend;
  o.dropout_p = p;
  o.training = p > 0.0f;
  o.mask_right_padded = true;
  return o;
}
}  // namespace

TEST_CASE("scale_mask_softmax parity: no mask, padding mask, a fully padded row, dropout") {
  Generator g(1);
  Tensor m = mask({1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1}, 4, 5);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto plain = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], Tensor(), 0.35f)};
    };
    CHECK(parity_check(plain, {randn({2, 3, 7, 37}, g)}, t, softmax_backward(t)) == "");  // Sk > 32 lanes
    auto masked = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f)};
    };
    CHECK(parity_check(masked, {randn({4, 2, 3, 5}, g), m}, t, softmax_backward(t)) == "");
    auto dropped = [&](const std::vector<Tensor>& in) {
      Generator d(5);  // a fresh generator per call: both backends draw the same mask
      return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.5f, 0.2f, true, d)};
    };
    CHECK(parity_check(dropped, {randn({4, 2, 3, 5}, g), m}, t, softmax_backward(t)) == "");
  }
}

// The CUDA register path reads N keys per access, N the widest power of two up to 16 bytes that
// divides Sk and leaves no lane idle; Sk > 1024 takes the generic path. Sk = 1 (one key: p = 1,
// dx = 0), 6 (N = 1), 37 (N = 1, two slots), 128 (BERT: N = 4), 256 (N = 8 in 16-bit, 4 in f32),
// 1024 (every slot of every lane), 1025 (generic). Each with the padding mask (entry 1 padded
// from the middle, entry 2 fully padded) and dropout, whose mask must match the CPU's bit for bit.
TEST_CASE("scale_mask_softmax parity at every register width and past it, masked, with dropout") {
  Generator g(3);
  for (DType t : kDtypes) {
    for (int64_t sk : {1, 6, 37, 128, 256, 1024, 1025}) {
      CAPTURE(dtype_name(t));
      CAPTURE(sk);
      std::vector<int64_t> keep(static_cast<size_t>(3 * sk), 1);
      for (int64_t j = sk / 2; j < sk; ++j) keep[static_cast<size_t>(sk + j)] = 0;
      for (int64_t j = 0; j < sk; ++j) keep[static_cast<size_t>(2 * sk + j)] = 0;
      Tensor m = mask(keep, 3, sk);
      auto dropped = [](const std::vector<Tensor>& in) {
        Generator d(6);
        return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.3f, 0.1f, true, d)};
      };
      CHECK(parity_check(dropped, {randn({3, 2, 3, sk}, g), m}, t, softmax_backward(t)) == "");
      auto plain = [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::scale_mask_softmax(in[0], in[1], 0.3f)};
      };
      CHECK(parity_check(plain, {randn({3, 2, 3, sk}, g), m}, t, softmax_backward(t)) == "");
    }
  }
}

TEST_CASE("attention (reference path) parity with a padding mask and dropout") {
  Generator g(2);
  const Tf32Scope tf32(false);  // f32 compares GEMM order, not TF32's 10-bit mantissa
  Tensor m = mask({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0},
                  2, 20);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    for (float p : {0.0f, 0.1f}) {
      CAPTURE(p);
      auto f = attention_fn(p, ops::AttentionBackend::Auto, ops::AttentionBackend::Auto);
      CHECK(parity_check(f, {randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), randn({2, 3, 20, 16}, g), m}, t,
                         three_roundings(t)) == "");
    }
  }
}

TEST_CASE("split_qkv_heads and merge_heads parity (pure data movement: exact)") {
  Generator g(3);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      auto p = ops::split_qkv_heads(in[0], 4);
      return std::vector<Tensor>{ops::merge_heads(p[0]), ops::merge_heads(p[1]), ops::merge_heads(p[2])};
    };
    CHECK(parity_check(f, {randn({2, 5, 3 * 32}, g)}, t, Tolerance{0.0, 0.0, "copies only"}) == "");
  }
}

TEST_CASE("cross_entropy with ignore_index parity") {
  Generator g(4);
  for (DType t : kDtypes) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::cross_entropy(in[0], in[1], 0.0f, -100)};
    };
    Tensor labels = Tensor::from_vector_i64({3, -100, -100, 7, 0, -100, 12, -100}, {8});
    CHECK(parity_check(f, {randn({8, 30}, g), labels}, t, rounded_once(t)) == "");
  }
}

TEST_CASE("cuDNN SDPA (attention_qkv, Fused) vs the CPU reference at BERT shapes: bf16/f16, padding, dropout 0") {
  Generator g(20);
  for (const BertShape& s : kBertShapes) {
    CAPTURE(s.H);
    CAPTURE(s.S);
    for (DType t : {DType::BF16, DType::F16}) {
      CAPTURE(dtype_name(t));
      for (bool masked : {false, true}) {
        CAPTURE(masked);
        auto f = [&](const std::vector<Tensor>& in) {
          const auto backend = in[0].is_cuda() ? ops::AttentionBackend::Fused : ops::AttentionBackend::Reference;
          return std::vector<Tensor>{
              ops::attention_qkv(in[0], s.H, masked ? in[1] : Tensor(), padded_options(backend, 0.0f))};
        };
        CHECK(parity_check(f, {randn({s.B, s.S, 3 * s.H * kHeadDim}, g), right_padded(s.B, s.S)}, t, sdpa_vs_cpu(t)) ==
              "");
      }
    }
  }
}

TEST_CASE("cuDNN SDPA through attention() ([B, H, S, D] strides) vs the CPU reference") {
  Generator g(21);
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    auto f = [](const std::vector<Tensor>& in) {
      const auto backend = in[0].is_cuda() ? ops::AttentionBackend::Fused : ops::AttentionBackend::Reference;
      return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], in[3], padded_options(backend, 0.0f))};
    };
    CHECK(parity_check(f, {randn({3, 4, 96, 64}, g), randn({3, 4, 96, 64}, g), randn({3, 4, 96, 64}, g),
                           right_padded(3, 96)},
                       t, sdpa_vs_cpu(t)) == "");
  }
}

TEST_CASE("cuDNN SDPA dropout: keep rate 1 - p, scaling 1 / (1 - p), the same mask in forward and backward") {
  // q = k = 0: every kept key gets probability 1 / L (L = the sequence's length); v of key j is the
  // unit vector e_j (S = D), so out[i, j] is key j's dropped probability: 0 or 1 / (L (1 - p)).
  // With dO = 1 the backward's dV[j, d] = sum_i out[i, j] for every d: the backward used the mask
  // the forward drew.
  const int64_t B = 2, H = 4, S = kHeadDim, D = kHeadDim, HD = H * D;
  const float p = 0.2f;
  std::vector<float> x(static_cast<size_t>(B * S * 3 * HD), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < S; ++j)
      for (int64_t h = 0; h < H; ++h) x[(b * S + j) * 3 * HD + 2 * HD + h * D + j] = 1.0f;
  const Tensor mask = right_padded(B, S).to(Device::cuda(0));
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    Tensor qkv = ops::cast_raw(Tensor::from_vector(x, {B, S, 3 * HD}), t).to(Device::cuda(0)).detach();
    qkv.set_requires_grad(true);
    Generator gen(5);
    Tensor out = ops::attention_qkv(qkv, H, mask, padded_options(ops::AttentionBackend::Fused, p), gen);
    CHECK(gen.offset() == static_cast<uint64_t>(B * H * S * S));  // the reference's reservation
    autograd::backward({out}, {ops::cast_raw(Tensor::ones({B, S, HD}), t).to(Device::cuda(0))});
    const std::vector<float> o = out.to_vector(), dqkv = qkv.grad().to_vector();
    int64_t kept = 0, total = 0, bad = 0, bad_dv = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = S - b * S / 3;
      const double scaled = 1.0 / (static_cast<double>(L) * (1.0 - p));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < S; ++j) {
          double column = 0;  // sum over queries of out[i, j]
          for (int64_t i = 0; i < S; ++i) {
            const double y = o[(b * S + i) * HD + h * D + j];
            column += y;
            if (j >= L) {
              bad += y != 0.0;  // a padded key is never attended
              continue;
            }
            ++total;
            if (y != 0.0) ++kept;
            bad += y != 0.0 && std::fabs(y - scaled) > 1e-2 * scaled;
          }
          for (int64_t d = 0; d < D; ++d) {
            const double dv = dqkv[(b * S + j) * 3 * HD + 2 * HD + h * D + d];
            bad_dv += std::fabs(dv - column) > 2e-2 * std::max(1.0, std::fabs(column));
          }
        }
    }
    CHECK(bad == 0);
    CHECK(bad_dv == 0);
    const double rate = static_cast<double>(kept) / static_cast<double>(total);  // ~45,000 draws: std 0.002
    CHECK(std::fabs(rate - (1.0 - p)) < 0.015);
    // The same generator state draws the same mask; the next draw another one.
    Generator again(5);
    CHECK(ops::attention_qkv(qkv, H, mask, padded_options(ops::AttentionBackend::Fused, p), again).to_vector() == o);
    CHECK(ops::attention_qkv(qkv, H, mask, padded_options(ops::AttentionBackend::Fused, p), again).to_vector() != o);
  }
}

TEST_CASE("Auto takes cuDNN exactly where attention.h says") {
  Generator g(22);
  const int64_t B = 2, H = 4, S = 64, D = 64;
  const Tensor qkv32 = randn({B, S, 3 * H * D}, g).to(Device::cuda(0));
  const Tensor mask = right_padded(B, S).to(Device::cuda(0));
  auto run = [&](const Tensor& x, ops::AttentionBackend b, bool promise) {
    ops::AttentionOptions o = padded_options(b, 0.0f);
    o.mask_right_padded = promise;
    return ops::attention_qkv(x, H, mask, o).to_vector();
  };
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    const Tensor x = ops::cast_raw(qkv32, t);
    auto [q, k, v] = ops::split_qkv_heads(x, H);
    CHECK(ops::fused_attention_unsupported(q, k, v, mask, padded_options(ops::AttentionBackend::Auto, 0.0f)) == "");
    const std::vector<float> fused = run(x, ops::AttentionBackend::Fused, true);
    const std::vector<float> ref = run(x, ops::AttentionBackend::Reference, true);
    REQUIRE(fused != ref);  // else equal bits could not tell the paths apart
    CHECK(run(x, ops::AttentionBackend::Auto, true) == fused);
    CHECK(run(x, ops::AttentionBackend::Auto, false) == ref);  // no promise: the mask stays on the reference
    CHECK_THROWS_WITH(run(x, ops::AttentionBackend::Fused, false), doctest::Contains("mask_right_padded"));
  }
  // f32 (TF32 GEMMs) and an unsupported head dim stay on the reference path under Auto.
  CHECK(run(qkv32, ops::AttentionBackend::Auto, true) == run(qkv32, ops::AttentionBackend::Reference, true));
  const Tensor odd = ops::cast_raw(randn({B, S, 3 * H * 12}, g), DType::BF16).to(Device::cuda(0));
  CHECK(run(odd, ops::AttentionBackend::Auto, true) == run(odd, ops::AttentionBackend::Reference, true));
  CHECK_THROWS_WITH(run(odd, ops::AttentionBackend::Fused, true), doctest::Contains("head dim"));
}

TEST_CASE("The encoder on CUDA bf16 records cuDNN's SDPA and no head split, merge or transpose") {
  BertConfig cfg;
  cfg.vocab_size = 64, cfg.hidden_size = 128, cfg.num_hidden_layers = 2, cfg.num_attention_heads = 2;
  cfg.intermediate_size = 256, cfg.max_position_embeddings = 64;
  BertModel m(cfg);
  m.to(Device::cuda(0));
  m.to(DType::BF16);
  m.train();
  std::vector<int64_t> ids(2 * 32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(5 + i % 50);
  Tensor input = Tensor::from_vector_i64(ids, {2, 32}).to(Device::cuda(0));
  Tensor y = m.forward(input, right_padded(2, 32).to(Device::cuda(0)), Tensor());
  const auto counts = testing::graph_op_counts(y);
  CHECK(counts.count("SdpaBackward") == 1);
  CHECK(counts.at("SdpaBackward") == cfg.num_hidden_layers);
  CHECK(counts.count("SplitQkvHeadsBackward") == 0);
  CHECK(counts.count("Transpose12Backward") == 0);
  ops::sum(ops::cast_raw(y, DType::F32)).backward();  // the backward runs too (cuDNN's sdpa_backward)
  for (auto& [name, w] : m.named_parameters()) CHECK(w.grad().defined());
}

// Issue 27 item 2: d(qkv) of keys past a sequence's length must be exactly 0 (their true gradient:
// they get probability 0), whatever the memory pool held. The pool is filled with NaN first (freed
// blocks the size of d(qkv), so its allocation likely reuses one): a backward that leaves those rows
// unwritten shows NaN there, one that writes them shows their value.
TEST_CASE("cuDNN SDPA backward on a NaN-poisoned pool: padded keys' dK, dV exactly 0, everything finite") {
  const int64_t B = 3, H = 12, S = 128, HD = H * kHeadDim;
  Generator g(31);
  const Tensor mask = right_padded(B, S).to(Device::cuda(0));
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    Tensor qkv = ops::cast_raw(randn({B, S, 3 * HD}, g), t).to(Device::cuda(0)).detach();
    qkv.set_requires_grad(true);
    Tensor out = ops::attention_qkv(qkv, H, mask, padded_options(ops::AttentionBackend::Fused, 0.0f));
    const Tensor seed = ops::cast_raw(randn({B, S, HD}, g), t).to(Device::cuda(0));
    {
      std::vector<Tensor> poison;
      for (int i = 0; i < 6; ++i) poison.push_back(Tensor::full({B, S, 3 * HD}, std::nan(""), t, Device::cuda(0)));
    }
    autograd::backward({out}, {seed});
    const std::vector<float> d = qkv.grad().to_vector();
    int64_t nonfinite = 0, padded_nonzero = 0;
    for (float v : d) nonfinite += !std::isfinite(v);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = S - b * S / 3; j < S; ++j)  // right_padded's padded keys of entry b
        for (int64_t col = HD; col < 3 * HD; ++col) padded_nonzero += d[(b * S + j) * 3 * HD + col] != 0.0f;
    CHECK(nonfinite == 0);
    CHECK(padded_nonzero == 0);
  }
}

// Issue 27 item 8: the backward reads dO as O's dtype. A backward seeded with an f32 gradient for a
// bf16/f16 output must give the same d(qkv) as one seeded in the output's dtype (the seed's values
// are exact in both).
TEST_CASE("cuDNN SDPA backward casts a gradient of another dtype (an f32 seed for a 16-bit output)") {
  const int64_t B = 2, H = 12, S = 128, HD = H * kHeadDim;
  Generator g(32);
  const Tensor mask = right_padded(B, S).to(Device::cuda(0));
  for (DType t : {DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(t));
    const Tensor x = ops::cast_raw(randn({B, S, 3 * HD}, g), t).to(Device::cuda(0));
    const Tensor seed16 = ops::cast_raw(randn({B, S, HD}, g), t).to(Device::cuda(0));
    std::vector<std::vector<float>> grads;
    for (const Tensor& seed : {seed16, ops::cast_raw(seed16, DType::F32)}) {
      Tensor qkv = x.detach().clone();
      qkv.set_requires_grad(true);
      Tensor out = ops::attention_qkv(qkv, H, mask, padded_options(ops::AttentionBackend::Fused, 0.0f));
      autograd::backward({out}, {seed});
      grads.push_back(qkv.grad().to_vector());
    }
    int64_t differ = 0;  // cuDNN's dQ may use atomics: allow its nondeterminism, not a misread dO
    for (size_t i = 0; i < grads[0].size(); ++i)
      differ += std::fabs(grads[0][i] - grads[1][i]) > 1e-2f * (1.0f + std::fabs(grads[0][i]));
    CHECK(differ == 0);
  }
}
