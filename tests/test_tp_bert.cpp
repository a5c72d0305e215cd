// tests/test_tp_bert.cpp: the tensor-parallel BERT (dist/tp/bert.h) against the canonical
// BertForMaskedLM, ranks as threads (dist/transport/comm_thread.h).
//
//   - init: TP rank r's parameters are exactly rank r's shards of BertForMaskedLM(cfg, seed), and
//     the shards assemble (pure, and gathered over the TP group) into the canonical state dict;
//   - TP T (2, 4) == one rank: the loss at every step and every canonical parameter after 5 AdamW
//     steps, in f64 (1e-10 relative per tensor: only the summation order differs) and in f32;
//   - one backward: replicated parameters get bit-identical gradients on every TP rank (no
//     all-reduce over TP is needed) equal to the canonical ones, and the shards' gradients
//     assemble into the canonical gradients;
//   - the collectives of one step: 1 + 2L all-reduces forward, 2L + 1 backward, one all_gather for
//     the loss, nothing else;
//   - dropout: replicated activations bit-identical across the TP group with dropout on; the
//     attention streams per TP rank (seeds, offsets, independent masks);
//   - memory: TP 2 holds half of every split tensor, and AdamW's state for them is half too;
//   - checkpoints: a canonical (DDP-style) checkpoint resumes under TP 2 and a TP 2 one resumes
//     on one rank, equal to the uninterrupted run;
//   - clipping: the canonical gradient norm from the shards (replicated gradients counted once);
//   - bf16: TP 2 against one rank within bf16 rounding.
// TP x DP (the grid, DDP and ZeRO over the DP group) is tests/test_tp_grid.cpp, and the same over
// MPI is tests/mpi_tp.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "dist/tp/bert.h"
#include "dist/tp/clip.h"
#include "dist/tp/shard.h"
#include "dist/transport/comm_thread.h"
#include "layers/models/bert.h"
#include "checkpoint/state_dict.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "tests/support/tp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::dist::tp;
using namespace tandem::testing::tp_fixture;

namespace {
// The model in f64, one forward and backward of the MLM loss on `b` (the reference's or a TP rank's).
template <class Model>
void f64_backward(Model& m, const MlmBatch& b) {
  m.to(DType::F64);
  m.mlm_loss(b.ids, b.mask, b.types, b.labels).backward();
}
}  // namespace

TEST_CASE("init: TP rank r holds exactly its shards of the canonical init; the shards assemble back") {
  const BertConfig cfg = tp_config();
  models::BertForMaskedLM ref(cfg, 7);
  const NamedTensors canonical = state_dict(ref);
  for (int n : {1, 2, 4}) {
    CAPTURE(n);
    std::vector<NamedTensors> shards(n);
    run_ranks(n, [&](Communicator& c) {
      TpBertForMaskedLM tp(cfg, c, 7);
      const NamedTensors mine = state_dict(tp);
      const NamedTensors want = shard_state_dict(canonical, bert_tp_layout(cfg), c.rank(), n);
      CHECK(same_bits(mine, want));
      CHECK(same_bits(gather_state_dict(mine, bert_tp_layout(cfg), c), canonical));
      shards[c.rank()] = mine;
    });
    CHECK(same_bits(assemble_state_dict(shards, bert_tp_layout(cfg)), canonical));
  }
  // The vocabulary of 50 splits 13, 13, 12, 12 at T = 4: no padding rows.
  run_ranks(4, [&](Communicator& c) {
    TpBertForMaskedLM tp(cfg, c, 7);
    CHECK(tp.vocab_rows().size == (c.rank() < 2 ? 13 : 12));
  });
}

TEST_CASE("TP T == one rank: the loss and every canonical parameter after 5 AdamW steps, in f64") {
  // The same sums in another order, in f64: 1e-10 relative per tensor is ~1e6 ulps of headroom,
  // and a wrong shard, a missing or doubled all-reduce is off by O(1). The key biases (their exact
  // gradient is 0: tp_fixture.h) are compared by size instead: both sides keep them at noise level.
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  const Reference ref = train_reference(cfg, b, DType::F64, kSteps);
  CHECK(key_bias_max(ref.params) < 1e-12);
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [&](Communicator& c) {
      Trained t = train_tp(cfg, b, DType::F64, kSteps, c);
      for (int s = 0; s < kSteps; ++s) CHECK(t.losses[s] == doctest::Approx(ref.losses[s]).epsilon(1e-12));
      const NamedTensors got = canonical_params(*t.model);
      const double d = max_named_rel_diff(got, ref.params, key_bias);
      if (c.rank() == 0) MESSAGE("TP ", n, " vs one rank, f64, 5 AdamW steps: max relative difference per tensor ", d);
      CHECK(d <= 1e-10);
      CHECK(key_bias_max(got) < 1e-12);
      CHECK(replicas_identical(*t.model));  // the replicated parameters never drift apart
    });
  }
}

TEST_CASE("TP T == one rank in f32: every step's gradient at the same weights; the weights after 5 steps") {
  // f32 rounding differs between the two sides' summation orders by ~1e-7 relative per gradient;
  // AdamW then divides each element by its own running scale, so elements whose gradient is near 0
  // turn last-bit differences into visible weight differences within a few steps (as DDP against
  // one process does: tests/mpi_encoder_ddp.cpp). So, like that test, each step compares the
  // gradients at the same weights (the reference loads the TP model's canonical weights) to 1e-5
  // relative per tensor; the weights after 5 steps are reported, and only bounded loosely.
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  const Reference ref = train_reference(cfg, b, DType::F32, kSteps);
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [&](Communicator& c) {
      auto model = std::make_shared<TpBertForMaskedLM>(cfg, c, 7);
      optim::OptimizerOptions oo;
      oo.lr = kLr;
      auto opt = optim::make_optimizer("adamw", model->named_parameters(), oo);
      double worst = 0;
      for (int s = 0; s < kSteps; ++s) {
        const Gradient want = reference_gradient(cfg, canonical_params(*model), b, DType::F32);
        opt->zero_grad();
        Tensor loss = model->mlm_loss(b.ids, b.mask, b.types, b.labels);
        loss.backward();
        CHECK(loss.item() == doctest::Approx(want.loss).epsilon(1e-6));
        const NamedTensors g = canonical_grads(*model);
        worst = std::max(worst, max_named_rel_diff(g, want.grads, key_bias));
        CHECK(key_bias_max(g) < 1e-6);
        opt->step();
      }
      CHECK(worst <= 1e-5);
      const double d = max_named_rel_diff(canonical_params(*model), ref.params, key_bias);
      if (c.rank() == 0)
        MESSAGE("TP ", n, " vs one rank, f32: gradients at most ", worst, " relative per tensor at every step; "
                "weights after 5 AdamW steps ", d);
      CHECK(d <= 1e-3);
      CHECK(replicas_identical(*model));
    });
  }
}

TEST_CASE("one backward: replicated gradients are whole and identical on every TP rank - no TP all-reduce needed") {
  // Each TP rank computes the replicated parameters' whole gradient itself: bit-identical across
  // the group, equal to the canonical gradient; the split parameters' gradients assemble into it.
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  models::BertForMaskedLM ref(cfg, 7);
  f64_backward(ref, b);
  const NamedTensors want = grads_of(ref);
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [&](Communicator& c) {
      TpBertForMaskedLM tp(cfg, c, 7);
      f64_backward(tp, b);
      CHECK(replicas_identical(tp, /*grads=*/true));
      const NamedTensors got = canonical_grads(tp);
      CHECK(max_named_rel_diff(got, want, key_bias) <= 1e-11);
      CHECK(key_bias_max(got) < 1e-14);  // 0 in exact arithmetic on both sides (tp_fixture.h)
      CHECK(key_bias_max(want) < 1e-14);
    });
  }
}

namespace {
// Counts the collectives issued through it by name, and forwards them to `inner`.
class CountingComm final : public Communicator {
 public:
  explicit CountingComm(Communicator& inner) : in_(inner) {}
  std::map<std::string, int> counts;
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  const char* backend() const override { return in_.backend(); }
  MarkPtr mark() override { return in_.mark(); }

 private:
  WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& n) override {
    ++counts["all_reduce " + n];
    return in_.all_reduce(t, op, n);
  }
  WorkPtr do_reduce_scatter(const Tensor& i, Tensor& o, ReduceOp op, const std::string& n) override {
    ++counts["reduce_scatter " + n];
    return in_.reduce_scatter(i, o, op, n);
  }
  WorkPtr do_all_gather(const Tensor& i, Tensor& o, const std::string& n) override {
    ++counts["all_gather " + n];
    return in_.all_gather(i, o, n);
  }
  WorkPtr do_broadcast(Tensor& t, int root, const std::string& n) override {
    ++counts["broadcast " + n];
    return in_.broadcast(t, root, n);
  }
  WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& n) override {
    ++counts["reduce " + n];
    return in_.reduce(t, root, op, n);
  }
  WorkPtr do_barrier(const std::string& n) override {
    ++counts["barrier " + n];
    return in_.barrier(n);
  }
  Communicator& in_;
};
}  // namespace

TEST_CASE("the collectives of one step: one all-reduce per block forward (g), one per block backward (f)") {
  const BertConfig cfg = tp_config();  // L = 2 layers
  const MlmBatch b = full_batch(2);
  run_ranks(2, [&](Communicator& c) {
    CountingComm counted(c);
    TpBertForMaskedLM tp(cfg, counted, 7);
    Tensor loss = tp.mlm_loss(b.ids, b.mask, b.types, b.labels);
    // Forward: the embedding's g, then attention and MLP g per layer; the loss gathers 3 numbers per row.
    CHECK(counted.counts == std::map<std::string, int>{{"all_reduce tp g forward", 1 + 2 * 2},
                                                       {"all_gather tp cross_entropy stats", 1}});
    counted.counts.clear();
    loss.backward();
    // Backward: attention and MLP f per layer, and the head's f; nothing for the embedding (g's
    // backward is the identity) or for the loss.
    CHECK(counted.counts == std::map<std::string, int>{{"all_reduce tp f backward", 2 * 2 + 1}});
  });
}

TEST_CASE("dropout: replicated activations identical across the TP group; attention streams per TP rank") {
  BertConfig cfg = tp_config();
  cfg.hidden_dropout_prob = 0.1;
  cfg.attention_probs_dropout_prob = 0.1;
  const MlmBatch b = full_batch(2);
  const int64_t B = 2, S = kSeq, H = cfg.hidden_size, L = cfg.num_hidden_layers, A = cfg.num_attention_heads;
  run_ranks(2, [&](Communicator& c) {
    Generator replicated(99);  // every TP rank seeds the replicated stream alike (train_encoder: --seed)
    TpBertOptions o;
    o.replicated_dropout = &replicated;
    TpBertForMaskedLM tp(cfg, c, 7, o);
    CHECK(tp.attention_generator().seed() == 7 + TpBertOptions::kAttentionSeedOffset + c.rank());
    Tensor h = tp.hidden(b.ids, b.mask, b.types);
    // The rule by its consequence: with dropout on, the hidden state after every dropout of a
    // replicated activation is still bit-identical on both ranks (different masks would not be).
    Tensor all = Tensor::empty({2 * h.numel()});
    c.all_gather(h.detach().view({h.numel()}), all)->wait();
    CHECK(std::memcmp(all.data_ptr(), static_cast<char*>(all.data_ptr()) + h.nbytes(), h.nbytes()) == 0);
    // The streams by their use: the replicated one drew the embeddings' and each block's masks
    // ([B, S, H] each: 1 + 2L); the attention one drew this rank's heads' [B, A/T, S, S] per layer.
    CHECK(replicated.offset() == static_cast<uint64_t>((1 + 2 * L) * B * S * H));
    CHECK(tp.attention_generator().offset() == static_cast<uint64_t>(L * B * (A / 2) * S * S));
    // Independent masks across TP ranks: the two ranks' attention streams, drawn at the same offset,
    // agree on about half of the elements at p = 0.5 (one stream would agree on all).
    Generator mine(tp.attention_generator().seed());
    Tensor keep = ops::dropout(Tensor::ones({4096}), 0.5f, true, mine);
    Tensor both = Tensor::empty({2 * 4096});
    c.all_gather(keep, both)->wait();
    const std::vector<float> v = both.to_vector();
    int agree = 0;
    for (int i = 0; i < 4096; ++i) agree += v[i] == v[4096 + i];
    CHECK(agree > 4096 * 0.45);  // binomial(4096, 1/2): 45 % is 6.4 standard deviations below the mean
    CHECK(agree < 4096 * 0.55);
  });
}

TEST_CASE("memory: TP 2 holds half of every split tensor, and half of AdamW's state for them") {
  const BertConfig cfg = tp_config();  // vocabulary 50: even at T = 2
  const MlmBatch b = full_batch(2);
  const TpLayout layout = bert_tp_layout(cfg);
  models::BertForMaskedLM ref(cfg, 7);
  auto bytes = [&](const NamedTensors& ts, bool split) {
    size_t n = 0;
    for (const auto& [name, t] : ts) {
      const std::string param = name.substr(0, name.find(".exp_avg") == std::string::npos ? name.size() : name.find(".exp_avg"));
      if (layout.count(param) == (split ? 1u : 0u) && name.find(".step") == std::string::npos) n += t.nbytes();
    }
    return n;
  };
  optim::OptimizerOptions oo;
  oo.lr = kLr;
  auto ref_opt = optim::make_optimizer("adamw", ref.named_parameters(), oo);
  adamw_step(ref, *ref_opt, b);
  run_ranks(2, [&](Communicator& c) {
    TpBertForMaskedLM tp(cfg, c, 7);
    auto opt = optim::make_optimizer("adamw", tp.named_parameters(), oo);
    adamw_step(tp, *opt, b);
    const NamedTensors mine = state_dict(tp), canon = state_dict(ref);
    CHECK(2 * bytes(mine, true) == bytes(canon, true));
    CHECK(bytes(mine, false) == bytes(canon, false));  // replicated: whole on every rank
    CHECK(2 * bytes(opt->state(), true) == bytes(ref_opt->state(), true));
    CHECK(bytes(opt->state(), false) == bytes(ref_opt->state(), false));
    if (c.rank() == 0)
      MESSAGE("TP 2 rank 0: split parameters ", bytes(mine, true), " of ", bytes(canon, true), " bytes, replicated ",
              bytes(mine, false), "; AdamW state for the split ones ", bytes(opt->state(), true), " of ",
              bytes(ref_opt->state(), true));
  });
}

TEST_CASE("checkpoints: canonical -> TP 2 -> canonical, resuming with the optimizer state, equal to one run") {
  // One rank trains 2 steps and "writes" its canonical state; TP 2 loads its shards (parameters
  // and AdamW state), trains 2 steps, gathers the canonical state; one rank loads that and trains
  // the last step. The result equals 5 uninterrupted steps on one rank (f64: 1e-10 per tensor).
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  const TpLayout layout = bert_tp_layout(cfg);
  const Reference straight = train_reference(cfg, b, DType::F64, kSteps);
  optim::OptimizerOptions oo;
  oo.lr = kLr;
  auto first = std::make_shared<models::BertForMaskedLM>(cfg, 7);
  first->to(DType::F64);
  auto first_opt = optim::make_optimizer("adamw", first->named_parameters(), oo);
  for (int s = 0; s < 2; ++s) adamw_step(*first, *first_opt, b);
  const NamedTensors ckpt1 = state_dict(*first), state1 = first_opt->state();
  NamedTensors ckpt2, state2;
  run_ranks(2, [&](Communicator& c) {
    TpBertForMaskedLM tp(cfg, c, 0, {}, /*init=*/false);  // weights come from the checkpoint
    tp.to(DType::F64);
    load_state_dict(tp, shard_state_dict(ckpt1, layout, c.rank(), 2));
    auto opt = optim::make_optimizer("adamw", tp.named_parameters(), oo);
    opt->load_state(shard_state_dict(state1, layout, c.rank(), 2));
    for (int s = 0; s < 2; ++s) adamw_step(tp, *opt, b);
    NamedTensors p = gather_state_dict(state_dict(tp), layout, c), st = gather_state_dict(opt->state(), layout, c);
    if (c.rank() == 0) ckpt2 = p, state2 = st;
  });
  models::BertForMaskedLM last(cfg, 0, false);
  last.to(DType::F64);
  load_state_dict(last, ckpt2);
  auto last_opt = optim::make_optimizer("adamw", last.named_parameters(), oo);
  last_opt->load_state(state2);
  adamw_step(last, *last_opt, b);
  CHECK(max_named_rel_diff(state_dict(last), straight.params, key_bias) <= 1e-10);
  CHECK(max_named_rel_diff(last_opt->state(), straight.state, key_bias) <= 1e-10);
}

TEST_CASE("clipping: the canonical gradient norm from the shards, replicated gradients counted once") {
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  models::BertForMaskedLM ref(cfg, 7);
  f64_backward(ref, b);
  std::vector<Tensor> grads;
  for (const Tensor& p : ref.parameters()) grads.push_back(p.grad());
  const double max_norm = 0.5 * optim::grad_norm(grads);  // so that clipping scales by about a half
  const double want = optim::clip_grad_norm(grads, max_norm);
  for (int n : {2, 4}) {
    CAPTURE(n);
    run_ranks(n, [&](Communicator& c) {
      TpBertForMaskedLM tp(cfg, c, 7);
      f64_backward(tp, b);
      CHECK(clip_grad_norm(tp, bert_tp_layout(cfg), c, max_norm) == doctest::Approx(want).epsilon(1e-12));
      CHECK(max_named_rel_diff(canonical_grads(tp), grads_of(ref), key_bias) <= 1e-11);  // clipped alike
    });
  }
}

TEST_CASE("bf16 (the AMP working precision): TP 2 == one rank within bf16 rounding") {
  // The 16-bit paths of the new pieces (the shard lookup, the cross-entropy statistics in f32 over
  // bf16 logits, all-reduces of bf16 activations). bf16 keeps 8 significant bits: 2^-8 = 0.4 % per
  // rounding, and the two sides round different partial sums, so a gradient tensor may differ by a
  // few of them: 3 % norm-wise (measured 0.8 %); the loss, an f32 mean, 0.1 % (measured 1.5e-5).
  // A wrong shard or collective is off by O(1).
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  models::BertForMaskedLM ref(cfg, 7);
  ref.to(DType::BF16);
  Tensor want = ref.mlm_loss(b.ids, b.mask, b.types, b.labels);
  want.backward();
  run_ranks(2, [&](Communicator& c) {
    TpBertForMaskedLM tp(cfg, c, 7);
    tp.to(DType::BF16);
    Tensor loss = tp.mlm_loss(b.ids, b.mask, b.types, b.labels);
    CHECK(loss.dtype() == DType::F32);  // the loss statistics stay f32, as ops::cross_entropy's
    CHECK(loss.item() == doctest::Approx(want.item()).epsilon(1e-3));
    loss.backward();
    const double d = max_named_rel_diff(canonical_grads(tp), grads_of(ref), key_bias);
    if (c.rank() == 0) MESSAGE("TP 2 vs one rank, bf16: loss ", loss.item(), " vs ", want.item(), "; gradients ", d);
    CHECK(d <= 0.03);
    CHECK(replicas_identical(tp, /*grads=*/true));
  });
}
