// tests/test_attention_grad.cpp: f64 gradient checks and value checks for scale_mask_softmax
// (with mask and dropout), attention, split_qkv_heads, merge_heads, and cross_entropy's
// ignore_index.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {
// [B = 2, Sk = 5]: batch 0 keeps 3 keys, batch 1 keeps all.
Tensor mask_2x5() { return Tensor::from_vector_i64({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 5}); }
}  // namespace

TEST_CASE("scale_mask_softmax: rows sum to 1, padded keys get exactly 0, a fully padded row is uniform") {
  Tensor x = rand_f64({3, 2, 4, 5}, 1, -3, 3, false);
  Tensor mask = Tensor::from_vector_i64({1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, {3, 5});
  std::vector<double> p = ops::scale_mask_softmax(x, mask, 0.7f).to_vector_f64();
  std::vector<double> xv = x.to_vector_f64();
  for (int64_t r = 0; r < 3 * 2 * 4; ++r) {
    int64_t b = r / 8;
    double s = 0;
    for (int j = 0; j < 5; ++j) s += p[r * 5 + j];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    if (b == 0) {
      CHECK(p[r * 5 + 2] == 0.0);
      CHECK(p[r * 5 + 4] == 0.0);
      // kept keys follow softmax(0.7 x) over the kept ones
      const double sc = 0.7f;  // the op takes the scale as a float
      double e0 = std::exp(sc * xv[r * 5]), e1 = std::exp(sc * xv[r * 5 + 1]), e3 = std::exp(sc * xv[r * 5 + 3]);
      CHECK(p[r * 5] == doctest::Approx(e0 / (e0 + e1 + e3)).epsilon(1e-12));
    }
    if (b == 1)
      for (int j = 0; j < 5; ++j) CHECK(p[r * 5 + j] == doctest::Approx(0.2).epsilon(1e-12));
  }
}

TEST_CASE("scale_mask_softmax gradcheck: with and without mask, with dropout at a fixed generator state") {
  Tensor x = rand_f64({2, 2, 3, 5}, 2, -2, 2);
  Tensor mask = mask_2x5();
  CHECK(gradcheck([](auto& in) { return ops::scale_mask_softmax(in[0], Tensor(), 0.5f); }, {x}) == "");
  CHECK(gradcheck([&](auto& in) { return ops::scale_mask_softmax(in[0], mask, 1.3f); }, {x}) == "");
  Generator g(7);
  CHECK(gradcheck(
            [&](auto& in) {
              g.set_state(7, 40);  // every probe sees the same dropout mask
              return ops::scale_mask_softmax(in[0], mask, 0.9f, 0.3f, true, g);
            },
            {x}) == "");
}

TEST_CASE("scale_mask_softmax dropout: drops from the probabilities, scales the rest, consumes numel") {
  Tensor x = rand_f64({1, 1, 50, 40}, 3, -1, 1, false);
  Generator g(11);
  Tensor p = ops::scale_mask_softmax(x, Tensor(), 1.0f);
  Tensor y = ops::scale_mask_softmax(x, Tensor(), 1.0f, 0.25f, true, g);
  CHECK(g.offset() == 2000u);
  std::vector<double> pv = p.to_vector_f64(), yv = y.to_vector_f64();
  int dropped = 0;
  for (size_t i = 0; i < pv.size(); ++i) {
    if (yv[i] == 0.0) ++dropped;
    else CHECK(yv[i] == doctest::Approx(pv[i] / 0.75).epsilon(1e-6));  // p is a float: 1/(1-p) rounds
  }
  CHECK(std::fabs(dropped / 2000.0 - 0.25) < 0.06);  // binomial std ~0.01: 6 sigma
  Generator e(11);
  CHECK(ops::scale_mask_softmax(x, Tensor(), 1.0f, 0.25f, false, e).to_vector_f64() == pv);  // eval: no dropout
  CHECK(e.offset() == 0u);
}

TEST_CASE("attention matches softmax(q k^T / sqrt(D)) v computed by hand, and gradchecks") {
  const int64_t B = 2, H = 2, S = 5, D = 3;
  Tensor q = rand_f64({B, H, S, D}, 4), k = rand_f64({B, H, S, D}, 5), v = rand_f64({B, H, S, D}, 6);
  Tensor mask = mask_2x5();
  std::vector<double> out = ops::attention(q, k, v, mask).to_vector_f64();
  std::vector<double> qv = q.to_vector_f64(), kv = k.to_vector_f64(), vv = v.to_vector_f64();
  std::vector<int64_t> mv = mask.to_vector_i64();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t bh = (b * H + h) * S;
        std::vector<double> w(S);
        double z = 0;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qv[(bh + i) * D + d] * kv[(bh + j) * D + d];
          w[j] = mv[b * S + j] ? std::exp(dot * static_cast<double>(static_cast<float>(1 / std::sqrt(3.0)))) : 0.0;
          z += w[j];
        }
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < S; ++j) o += w[j] / z * vv[(bh + j) * D + d];
          CHECK(out[(bh + i) * D + d] == doctest::Approx(o).epsilon(1e-12));
        }
      }
  CHECK(gradcheck([&](auto& in) { return ops::attention(in[0], in[1], in[2], mask); }, {q, k, v}) == "");
  ops::AttentionOptions fused;
  fused.backend = ops::AttentionBackend::Fused;
  CHECK_THROWS(ops::attention(q, k, v, mask, fused));
}

TEST_CASE("split_qkv_heads and merge_heads: layout and gradcheck") {
  const int64_t B = 2, S = 3, heads = 2, D = 2, Hd = heads * D;
  Tensor qkv = rand_f64({B, S, 3 * Hd}, 8);
  auto parts = ops::split_qkv_heads(qkv, heads);
  std::vector<double> x = qkv.to_vector_f64();
  for (int t = 0; t < 3; ++t) {
    CHECK(parts[t].shape() == Shape{B, heads, S, D});
    std::vector<double> p = parts[t].to_vector_f64();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d)
            CHECK(p[((b * heads + h) * S + s) * D + d] == x[(b * S + s) * 3 * Hd + t * Hd + h * D + d]);
  }
  CHECK(ops::merge_heads(parts[1]).to_vector_f64() ==
        [&] {
          std::vector<double> k;
          for (int64_t r = 0; r < B * S; ++r)
            for (int64_t c = 0; c < Hd; ++c) k.push_back(x[r * 3 * Hd + Hd + c]);
          return k;
        }());
  // Weight the three outputs differently so a mixed-up slot shows in the gradient; v unused.
  CHECK(gradcheck(
            [&](auto& in) {
              auto p = ops::split_qkv_heads(in[0], heads);
              return ops::add(ops::merge_heads(p[0]), ops::scale(ops::merge_heads(p[1]), 3.0f));
            },
            {qkv}) == "");
  CHECK(gradcheck([&](auto& in) { return ops::merge_heads(in[0]); }, {rand_f64({2, 3, 4, 2}, 9)}) == "");
}

TEST_CASE("cross_entropy with ignore_index: mean over kept rows, gradcheck, all ignored gives 0") {
  Tensor logits = rand_f64({5, 4}, 10, -2, 2);
  Tensor labels = Tensor::from_vector_i64({1, -100, 3, -100, 0}, {5});
  Tensor kept_logits = Tensor::from_vector_f64(
      [&] {
        std::vector<double> v = logits.to_vector_f64(), out;
        for (int r : {0, 2, 4})
          for (int c = 0; c < 4; ++c) out.push_back(v[r * 4 + c]);
        return out;
      }(),
      {3, 4});
  double expect = ops::cross_entropy(kept_logits, Tensor::from_vector_i64({1, 3, 0}, {3}), 0.1f).item();
  CHECK(ops::cross_entropy(logits, labels, 0.1f, -100).item() == doctest::Approx(expect).epsilon(1e-12));
  CHECK(gradcheck([&](auto& in) { return ops::cross_entropy(in[0], labels, 0.1f, -100); }, {logits}) == "");
  Tensor none = Tensor::from_vector_i64({-100, -100, -100, -100, -100}, {5});
  Tensor fresh = rand_f64({5, 4}, 11, -2, 2);
  Tensor l0 = ops::cross_entropy(fresh, none, 0.0f, -100);
  CHECK(l0.item() == 0.0);
  l0.backward();
  for (double g : fresh.grad().to_vector_f64()) CHECK(g == 0.0);
  // Without ignored labels it is the plain loss.
  Tensor all = Tensor::from_vector_i64({1, 2, 3, 0, 0}, {5});
  CHECK(ops::cross_entropy(logits, all, 0.0f, -100).item() == ops::cross_entropy(logits, all).item());
}
