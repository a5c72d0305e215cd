// tests/test_bert_fused_tails.cpp: the encoder's outputs run as fused ops (ops::bias_dropout_add,
// ops::bias_gelu in layers/transformer.cpp) and must equal the unfused sequences they replaced -
// dense with its bias, Dropout module, residual add, LayerNorm (post-LN) - in values, in the
// dropout masks drawn from the module's generator, and in every gradient, post-LN and pre-LN.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/ops/ops.h"
#include "layers/transformer.h"
#include "tests/support/gradcheck.h"  // defines: max_abs_diff

using namespace tandem;
using testing::max_abs_diff;

namespace {
Tensor leaf(const Shape& s, Generator& g) {
  Tensor t = randn(s, g);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST_CASE("BertResidualOutput (fused bias + dropout + residual) equals dense, Dropout, add, LayerNorm") {
  for (bool pre_ln : {false, true}) {
    CAPTURE(pre_ln);
    BertConfig cfg;
    cfg.hidden_size = 24;
    cfg.hidden_dropout_prob = 0.25;
    cfg.pre_layer_norm = pre_ln;
    BertResidualOutput out(cfg, 40, "BertOutput");
    Generator init(3);
    std::map<std::string, Tensor> p;
    for (auto& [name, t] : out.named_parameters()) {
      normal_(t, 0.0, 0.3, init);
      p[name] = t;
    }
    out.train();
    Tensor h = leaf({3, 5, 40}, init), r = leaf({3, 5, 24}, init);
    Tensor dy = randn({3, 5, 24}, init);

    default_generator().set_state(11, 500);
    Tensor y = out.forward(h, r);
    const uint64_t fused_offset = default_generator().offset();
    y.backward(dy);
    std::vector<double> y1 = y.to_vector_f64(), dh1 = h.grad().to_vector_f64(), dr1 = r.grad().to_vector_f64();
    std::vector<double> dw1 = p["dense.weight"].grad().to_vector_f64(), db1 = p["dense.bias"].grad().to_vector_f64();
    h.set_grad(Tensor());
    r.set_grad(Tensor());
    p["dense.weight"].set_grad(Tensor());
    p["dense.bias"].set_grad(Tensor());

    default_generator().set_state(11, 500);
    Tensor z = ops::add(ops::dropout(ops::linear(h, p["dense.weight"], p["dense.bias"]), 0.25f, true), r);
    if (!pre_ln) z = ops::layer_norm(z, p["LayerNorm.weight"], p["LayerNorm.bias"], cfg.layer_norm_eps);
    CHECK(default_generator().offset() == fused_offset);  // the same counters: the same mask
    z.backward(dy);
    // f32 on the CPU: only the bias add's place differs (inside the GEMM's C vs after it).
    CHECK(max_abs_diff(y1, z.to_vector_f64()) < 1e-5);
    CHECK(max_abs_diff(dh1, h.grad().to_vector_f64()) < 1e-5);
    CHECK(max_abs_diff(dr1, r.grad().to_vector_f64()) < 1e-5);
    CHECK(max_abs_diff(dw1, p["dense.weight"].grad().to_vector_f64()) < 1e-4);
    CHECK(max_abs_diff(db1, p["dense.bias"].grad().to_vector_f64()) < 1e-5);
  }
}
