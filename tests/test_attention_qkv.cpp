// tests/test_attention_qkv.cpp: ops::attention_qkv on the CPU (its reference path): the same values,
// gradients, dropout counters and bits as split_qkv_heads -> attention -> merge_heads, f64 gradient
// checks with a padding mask (dropout 0 and dropout > 0 with a fixed generator), the
// mask_right_padded promise and the Fused policy's refusals, and the BERT encoder's use of it.
// The cuDNN path's parity with this reference is tests/gpu_attention_parity.cpp's.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/transformer.h"
#include "tests/support/autograd_graph.h"
#include "tests/support/gradcheck.h"

using namespace tandem;
using testing::gradcheck;
using testing::rand_f64;

namespace {
constexpr int64_t kB = 2, kS = 5, kHeads = 2, kD = 3;
// Right-padded: batch 0 keeps 3 tokens, batch 1 all 5.
Tensor right_padded_mask() { return Tensor::from_vector_i64({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {kB, kS}); }

ops::AttentionOptions options(float p) {
  ops::AttentionOptions o;
  o.dropout_p = p;
  o.training = p > 0.0f;
  o.mask_right_padded = true;
  return o;
}

Tensor composed(const Tensor& qkv, const Tensor& mask, const ops::AttentionOptions& o, Generator& g) {
  auto [q, k, v] = ops::split_qkv_heads(qkv, kHeads);
  return ops::merge_heads(ops::attention(q, k, v, mask, o, g));
}
}  // namespace

TEST_CASE("attention_qkv equals split -> attention -> merge bit for bit: values, gradients, dropout counters") {
  for (DType t : {DType::F64, DType::F32})
    for (float p : {0.0f, 0.3f}) {
      CAPTURE(dtype_name(t));
      CAPTURE(p);
      Tensor base = rand_f64({kB, kS, 3 * kHeads * kD}, 1, -2, 2, false);
      Tensor a = ops::cast_raw(base, t).detach(), b = ops::cast_raw(base, t).detach();
      a.set_requires_grad(true);
      b.set_requires_grad(true);
      Generator ga(7), gb(7);
      Tensor ya = ops::attention_qkv(a, kHeads, right_padded_mask(), options(p), ga);
      Tensor yb = composed(b, right_padded_mask(), options(p), gb);
      CHECK(ya.shape() == Shape{kB, kS, kHeads * kD});
      CHECK(ya.to_vector_f64() == yb.to_vector_f64());
      CHECK(ga.offset() == gb.offset());
      CHECK(ga.offset() == (p > 0 ? uint64_t{kB * kHeads * kS * kS} : 0u));
      Tensor w = rand_f64({kB, kS, kHeads * kD}, 2, -1, 1, false);
      ops::sum(ops::mul(ya, ops::cast_raw(w, t))).backward();
      ops::sum(ops::mul(yb, ops::cast_raw(w, t))).backward();
      CHECK(a.grad().shape() == a.shape());
      CHECK(a.grad().to_vector_f64() == b.grad().to_vector_f64());
    }
}

TEST_CASE("attention_qkv gradchecks in f64 with a padding mask, without and with dropout") {
  Tensor qkv = rand_f64({kB, kS, 3 * kHeads * kD}, 3);
  for (float p : {0.0f, 0.2f}) {
    CAPTURE(p);
    // A fresh generator per evaluation: every probe draws the same dropout mask.
    CHECK(gradcheck(
              [&](auto& in) {
                Generator g(11);
                return ops::attention_qkv(in[0], kHeads, right_padded_mask(), options(p), g);
              },
              {qkv}) == "");
  }
  // No mask, default options.
  CHECK(gradcheck([&](auto& in) { return ops::attention_qkv(in[0], kHeads, Tensor()); }, {qkv}) == "");
}

TEST_CASE("mask_right_padded is a promise the CPU checks; without it any mask runs the reference") {
  Tensor qkv = rand_f64({kB, kS, 3 * kHeads * kD}, 4, -1, 1, false);
  Tensor hole = Tensor::from_vector_i64({1, 0, 1, 0, 0, 1, 1, 1, 1, 1}, {kB, kS});
  Tensor empty_row = Tensor::from_vector_i64({0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, {kB, kS});
  for (const Tensor& m : {hole, empty_row}) {
    CHECK_THROWS_WITH(ops::attention_qkv(qkv, kHeads, m, options(0.0f)),
                      doctest::Contains("mask_right_padded is set"));
    auto [q, k, v] = ops::split_qkv_heads(qkv, kHeads);
    CHECK_THROWS(ops::attention(q, k, v, m, options(0.0f)));
    ops::AttentionOptions plain;  // no promise: the reference path takes any mask
    Generator g1(1), g2(1);
    CHECK(ops::attention_qkv(qkv, kHeads, m, plain, g1).to_vector_f64() ==
          composed(qkv, m, plain, g2).to_vector_f64());
  }
  CHECK_NOTHROW(ops::attention_qkv(qkv, kHeads, right_padded_mask(), options(0.0f)));
}

TEST_CASE("Fused refuses the CPU with the reason; Auto falls back to the reference") {
  Tensor qkv = rand_f64({kB, kS, 3 * kHeads * kD}, 5, -1, 1, false);
  ops::AttentionOptions fused = options(0.0f);
  fused.backend = ops::AttentionBackend::Fused;
  CHECK_THROWS_WITH(ops::attention_qkv(qkv, kHeads, right_padded_mask(), fused), doctest::Contains("CUDA"));
  auto [q, k, v] = ops::split_qkv_heads(qkv, kHeads);
  CHECK(ops::fused_attention_unsupported(q, k, v, Tensor(), {}).find("CUDA") != std::string::npos);
  CHECK_THROWS_WITH(ops::attention_qkv(qkv, 4, Tensor()), doctest::Contains("3 * heads * head_dim"));
}

TEST_CASE("BertSelfAttention runs attention_qkv on the fused projection: one graph node family per layer") {
  BertConfig cfg;
  cfg.vocab_size = 40, cfg.hidden_size = 8, cfg.num_hidden_layers = 2, cfg.num_attention_heads = 2;
  cfg.intermediate_size = 16, cfg.max_position_embeddings = 8;
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0;
  BertModel m(cfg);
  Tensor ids = Tensor::from_vector_i64({4, 8, 15, 16, 23, 1, 2, 3, 4, 5}, {2, 5});
  Tensor y = m.forward(ids, right_padded_mask(), Tensor());
  // On the CPU attention_qkv is the reference (split, GEMMs, softmax, merge): one split per layer
  // shows the encoder calls it once per layer; gpu_attention_parity checks that on CUDA bf16 the
  // same model records SdpaBackward and no split or transpose.
  const auto counts = testing::graph_op_counts(y);
  CHECK(counts.at("SplitQkvHeadsBackward") == cfg.num_hidden_layers);
  CHECK(counts.count("SdpaBackward") == 0);
  // A mask with a hole breaks BertConfig's default promise on the CPU...
  Tensor hole = Tensor::from_vector_i64({1, 0, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 5});
  CHECK_THROWS(m.forward(ids, hole, Tensor()));
  // ... and runs (on the reference path) once the config says so.
  cfg.attention_mask_right_padded = false;
  BertModel relaxed(cfg);
  CHECK_NOTHROW(relaxed.forward(ids, hole, Tensor()));
}
