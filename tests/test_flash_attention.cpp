// tests/test_flash_attention.cpp: the flash path (AttentionBackend::Fused) on the CPU, where it
// runs the CUDA kernels' blocking in plain C++ (core/ops/attention/cpu_flash.cpp). These tests
// validate the algorithm (tiles, tails, online softmax, two-pass backward, dropout counters)
// against the reference path; the CUDA details (indices, shuffles, shared memory) are for
// gpu_attention_parity on a GPU.
//
// Shapes are chosen to cross every tile boundary the kernels have: Sq = 37 is 16 + 16 + 5 query
// rows (forward/dQ blocks) and 32 + 5 (dK/dV query tiles); Sk = 45 is 32 + 13 keys (key tiles)
// and 16 + 16 + 13 (dK/dV key blocks); Sq = 16, Sk = 32 hit the boundaries exactly.
// In f64 both paths compute in f64, so they agree to rounding (1e-9 relative); in f32 the twin
// accumulates in f32 like the GPU while the reference keeps softmax statistics in double.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "core/random.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {

struct Run {
  std::vector<double> out, dq, dk, dv;
  uint64_t gen_offset;
};

// Forward with `backend`, then backward of <out, W>; q, k, v are fresh leaves each call.
Run run(ops::AttentionBackend backend, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
        float p, const Tensor& w) {
  Tensor lq = q.detach(), lk = k.detach(), lv = v.detach();
  lq.set_requires_grad(true);
  lk.set_requires_grad(true);
  lv.set_requires_grad(true);
  ops::AttentionOptions o;
  o.backend = backend;
  o.dropout_p = p;
  o.training = p > 0.0f;
  Generator gen(17);
  gen.set_state(17, 1000);  // a nonzero offset: the counters must be offset + index on both paths
  Tensor out = ops::attention(lq, lk, lv, mask, o, gen);
  autograd::backward({out}, {w});
  return {out.to_vector_f64(), lq.grad().to_vector_f64(), lk.grad().to_vector_f64(), lv.grad().to_vector_f64(),
          gen.offset()};
}

// "" or the first mismatches of |got - ref| <= atol + rtol |ref|, so a person can judge them.
std::string compare(const char* what, const std::vector<double>& ref, const std::vector<double>& got, double rtol,
                    double atol) {
  if (ref.size() != got.size()) return std::string(what) + ": sizes differ\n";
  std::string report;
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i])) continue;
    ++bad;
    if (shown++ < 5) {
      char line[160];
      std::snprintf(line, sizeof line, "%s[%zu]: reference %.12g, flash %.12g\n", what, i, ref[i], got[i]);
      report += line;
    }
  }
  if (bad) report += std::string(what) + ": " + std::to_string(bad) + " of " + std::to_string(ref.size()) + " differ\n";
  return report;
}

std::string compare_runs(const Run& ref, const Run& got, double rtol, double atol) {
  std::string r = compare("out", ref.out, got.out, rtol, atol) + compare("dq", ref.dq, got.dq, rtol, atol) +
                  compare("dk", ref.dk, got.dk, rtol, atol) + compare("dv", ref.dv, got.dv, rtol, atol);
  if (ref.gen_offset != got.gen_offset) r += "the paths reserve different numbers of dropout counters\n";
  return r;
}

struct Case {
  int64_t B, H, Sq, Sk, D;
};

// [B, Sk] masks: batch 0 keeps a prefix, batch 1 (if any) has holes, batch 2 (if any) is fully
// padded (its rows must come out uniform over all keys, as in Hugging Face).
Tensor make_mask(int64_t B, int64_t Sk) {
  std::vector<int64_t> m(static_cast<size_t>(B * Sk), 1);
  for (int64_t j = Sk * 2 / 3; j < Sk; ++j) m[j] = 0;
  if (B > 1)
    for (int64_t j = 0; j < Sk; j += 3) m[Sk + j] = 0;
  if (B > 2)
    for (int64_t j = 0; j < Sk; ++j) m[2 * Sk + j] = 0;
  return Tensor::from_vector_i64(m, {B, Sk});
}

void check_twin_against_reference(DType dtype, double rtol, double atol) {
  const Case cases[] = {{3, 2, 37, 45, 8}, {2, 2, 16, 32, 40}, {1, 1, 1, 1, 16}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    CAPTURE(c.Sq);
    CAPTURE(c.Sk);
    CAPTURE(c.D);
    auto input = [&](int64_t S) {
      Tensor t = rand_f64({c.B, c.H, S, c.D}, seed++, -2.0, 2.0, false);
      return dtype == DType::F64 ? t : ops::cast(t, dtype);
    };
    Tensor q = input(c.Sq), k = input(c.Sk), v = input(c.Sk), w = input(c.Sq);
    for (bool masked : {false, true}) {
      Tensor mask = masked ? make_mask(c.B, c.Sk) : Tensor();
      for (float p : {0.0f, 0.2f}) {
        CAPTURE(masked);
        CAPTURE(p);
        const Run ref = run(ops::AttentionBackend::Reference, q, k, v, mask, p, w);
        const Run got = run(ops::AttentionBackend::Fused, q, k, v, mask, p, w);
        CHECK(compare_runs(ref, got, rtol, atol) == "");
      }
    }
  }
}

}  // namespace

TEST_CASE("flash twin equals the reference path in f64: tiles with tails, padding, a fully padded entry, dropout") {
  // Both compute in f64; only the order of additions differs (tile by tile vs one GEMM).
  check_twin_against_reference(DType::F64, 1e-9, 1e-12);
}

TEST_CASE("flash twin matches the reference path in f32") {
  // The twin accumulates in f32 (as the GPU) over <= 45 products of size <= 4; the reference's
  // GEMMs are f32 too but its softmax statistics are double: a few ulp of the largest term.
  check_twin_against_reference(DType::F32, 1e-4, 1e-5);
}

TEST_CASE("flash twin: a fully padded row is the mean of v; padded keys get no gradient") {
  const int64_t B = 1, H = 1, Sq = 3, Sk = 40, D = 8;
  Tensor q = rand_f64({B, H, Sq, D}, 41), k = rand_f64({B, H, Sk, D}, 42), v = rand_f64({B, H, Sk, D}, 43);
  Tensor none = Tensor::from_vector_i64(std::vector<int64_t>(Sk, 0), {B, Sk});
  ops::AttentionOptions o;
  o.backend = ops::AttentionBackend::Fused;
  std::vector<double> out = ops::attention(q, k, v, none, o).to_vector_f64(), vv = v.to_vector_f64();
  for (int64_t i = 0; i < Sq; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < Sk; ++j) mean += vv[j * D + d] / Sk;
      CHECK(out[i * D + d] == doctest::Approx(mean).epsilon(1e-12));
    }
  // Half the keys padded: their dK is exactly 0 (their scores are replaced, not used).
  std::vector<int64_t> half(Sk, 1);
  for (int64_t j = 0; j < Sk; j += 2) half[j] = 0;
  Tensor lk = k.detach();
  lk.set_requires_grad(true);
  Tensor y = ops::attention(q, lk, v, Tensor::from_vector_i64(half, {B, Sk}), o);
  autograd::backward({y}, {Tensor::ones(y.shape(), y.dtype())});
  std::vector<double> dk = lk.grad().to_vector_f64();
  for (int64_t j = 0; j < Sk; j += 2)
    for (int64_t d = 0; d < D; ++d) CHECK(dk[j * D + d] == 0.0);
}

TEST_CASE("flash twin gradchecks: padding across two key tiles, and dropout at a fixed generator state") {
  const int64_t B = 2, H = 1, Sq = 5, Sk = 35, D = 8;
  Tensor q = rand_f64({B, H, Sq, D}, 51), k = rand_f64({B, H, Sk, D}, 52), v = rand_f64({B, H, Sk, D}, 53);
  Tensor mask = make_mask(B, Sk);
  ops::AttentionOptions o;
  o.backend = ops::AttentionBackend::Fused;
  CHECK(gradcheck([&](auto& in) { return ops::attention(in[0], in[1], in[2], mask, o); }, {q, k, v}) == "");
  o.dropout_p = 0.3f;
  o.training = true;
  CHECK(gradcheck(
            [&](auto& in) {
              Generator g(8);  // the same mask on every evaluation
              return ops::attention(in[0], in[1], in[2], mask, o, g);
            },
            {q, k, v}) == "");
}

TEST_CASE("attention backend policy on the CPU: Auto is the reference path; Fused refuses what it cannot run") {
  Tensor q = rand_f64({1, 2, 4, 8}, 61, -1, 1, false), k = rand_f64({1, 2, 6, 8}, 62, -1, 1, false);
  Tensor v = rand_f64({1, 2, 6, 8}, 63, -1, 1, false);
  ops::AttentionOptions ref, autop;
  ref.backend = ops::AttentionBackend::Reference;
  CHECK(ops::attention(q, k, v, Tensor(), autop).to_vector_f64() ==
        ops::attention(q, k, v, Tensor(), ref).to_vector_f64());  // bit for bit: the same code ran
  ops::AttentionOptions fused;
  fused.backend = ops::AttentionBackend::Fused;
  Tensor q12 = rand_f64({1, 2, 4, 12}, 64, -1, 1, false), k12 = rand_f64({1, 2, 6, 12}, 65, -1, 1, false);
  CHECK_THROWS_WITH(ops::attention(q12, k12, k12, Tensor(), fused),
                    doctest::Contains("multiple of 8"));  // head dim 12
  Tensor v16 = rand_f64({1, 2, 6, 16}, 66, -1, 1, false);
  CHECK_THROWS(ops::attention(q, k, v16, Tensor(), fused));  // v's head dim differs
  CHECK_THROWS(ops::attention(q, k, v, Tensor::from_vector_i64({1, 1, 1}, {1, 3}), fused));  // mask not [B, Sk]
  // Auto with an unsupported head dim silently takes the reference path.
  CHECK_NOTHROW(ops::attention(q12, k12, k12, Tensor(), autop));
}

TEST_CASE("Auto's size rule: flash only for large 16-bit CUDA problems (where memory, not speed, decides)") {
  const int64_t big = ops::kAutoFusedMinBytes, small = big - 1;
  CHECK(ops::auto_prefers_fused(true, DType::BF16, big));
  CHECK(ops::auto_prefers_fused(true, DType::F16, 4 * big));
  CHECK_FALSE(ops::auto_prefers_fused(true, DType::BF16, small));  // BERT's shapes: the faster reference
  CHECK_FALSE(ops::auto_prefers_fused(true, DType::F32, 4 * big));  // f32 keeps the TF32 GEMMs
  CHECK_FALSE(ops::auto_prefers_fused(false, DType::BF16, 4 * big));  // the CPU twin is a test vehicle
  // BERT-large at seq 512, batch 8: 8 * 16 * 512 * 512 * 2 bytes = 64 MiB per layer -> reference.
  CHECK_FALSE(ops::auto_prefers_fused(true, DType::BF16, int64_t{8} * 16 * 512 * 512 * 2));
  // attention.h's example: batch 8, 16 heads, 16-bit; the rule switches between Sq = Sk = 1448 and 1449.
  CHECK_FALSE(ops::auto_prefers_fused(true, DType::BF16, int64_t{8} * 16 * 1448 * 1448 * 2));
  CHECK(ops::auto_prefers_fused(true, DType::BF16, int64_t{8} * 16 * 1449 * 1449 * 2));
}
