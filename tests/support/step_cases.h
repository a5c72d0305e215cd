// tests/support/step_cases.h: the training-step library's Step (apps/trainer/step/step.h) on one
// communicator - the bodies tests/mpi_trainer_step.cpp runs under mpiexec -n 2 and -n 4 (the world's
// CPU communicator) and tests/test_trainer_step.cpp runs in one process at 1, 2 and 4 thread ranks
// (dist/transport/comm_thread.h). Each body is collective: every rank calls it together.
//
// The model: a small conv net built from layers/ (so the AMP cast applies to it) with no BatchNorm
// or dropout (their batch statistics and randomness would differ between a batch and
// its micro-batches), on tests/support/ddp_fixture.h's data.
//
//  - The Step equals the hand-written loop the trainers ran before it (apps/train/loop.cpp and
//    apps/encoder/loop.cpp, written out here with dist/ and optim/ directly): for DDP, ZeRO-1,
//    ZeRO-2 and ZeRO-3, in f32, bf16 and fp16, with SGD (momentum), AdamW and LAMB, with and without clipping,
//    the parameters after 3 steps are bit-identical to the loop's and the gathered optimizer state
//    (with AMP's masters and loss scale) is identical too. Same operations in the same order, so
//    no tolerance: any difference is a change of behaviour. Ranks stay bit-identical.
//  - Gradient accumulation: N = 2 micro-batches of b rows per rank equal one batch of 2b rows, within
//    rounding (1e-5 relative, ddp_fixture's CPU measure: the two sides add the same products in
//    another order), under DDP, ZeRO-1 and the parameter server; bf16 AMP under DDP within 16-bit
//    rounding (3e-2 norm-wise: the micro-batches' bf16 gradients are rounded before they are summed).
//    Only the last micro-batch's backward communicates: the DDP timeline records one step per update.
//  - A checkpoint's state from state() under ZeRO-2 + bf16, restored through the Step's Restore into
//    DDP + bf16, continues like the uninterrupted run bit for bit. Every rank trains on the same rows
//    (as tests/mpi_zero_amp.cpp does): N equal addends sum exactly in any order, so ZeRO-2's
//    reduce-scatter and DDP's all-reduce agree, and the comparison tests the state, not MPICH's
//    summation order.
//  - The non-finite policy: a NaN loss on one rank skips the update on every rank (skip) or stops
//    every rank with RunStopped (stop); parameters unchanged either way. So do NaN gradients on one
//    rank while every loss is finite (DDP and ZeRO-1, whose check reads this rank's shard) - before
//    issue 20 they were applied, and the NaN weights went on into checkpoints. Weights an update
//    made non-finite (an infinite LR) stop the next step under skip as under stop, and the end of
//    the run (finish) too; check_state_finite refuses a checkpoint of them under every policy, off
//    included.
//  - AMP's found-inf agreement: fp16 gradients that overflow on one rank only (every loss finite)
//    skip the update on every rank and halve every rank's loss scale alike, under DDP and ZeRO-1.
//  - --model-ema's average, handed to the Step (set_ema), moves after applied updates only and equals
//    one updated by hand after them, bit for bit.
//  - Tensor parallelism through the Step (tp = 2, TpParts over a dist::tp::Grid; DDP and ZeRO-1 over
//    the DP groups; clipping by the canonical norm) equals the canonical BERT under the Step's DDP
//    over every rank: losses and norms to 1e-12, parameters to 1e-10 in f64 (tp_fixture's measure).
//    Its checkpoint is canonical: state() is the unsplit run's optimizer state (1e-7, see there) and
//    the model's with_canonical() its weights (1e-10); a file of both, resumed at TP 2 through the
//    Restore (the model's local_state_dict, the Step sharding the state), holds the same weights and
//    state bit for bit, and under DDP takes the same next step.
//  - Refusals at construction name the option: a CUDA graph on the CPU, the parameter server with
//    AMP, accumulation under ZeRO-2.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "apps/trainer/step/amp.h"
#include "apps/trainer/step/ema.h"
#include "apps/trainer/step/nonfinite.h"
#include "apps/trainer/step/step.h"
#include "core/ops/copy/copy.h"
#include "core/ops/ops.h"
#include "dist/collectives/strings.h"
#include "dist/communicator.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "layers/amp_cast.h"
#include "checkpoint/checkpoint.h"
#include "layers/layers.h"
#include "optim/amp.h"
#include "optim/clip.h"
#include "tests/support/ddp_fixture.h"
#include "tests/support/tp_fixture.h"

namespace tandem::testing::step_cases {

using namespace tandem::testing::ddp_fixture;
using namespace tandem::trainer;


inline const dist::BucketingOptions kBuckets{256, 1024};  // several buckets: shard boundaries cut through parameters
constexpr double kStepLr = 0.01;

struct Config {
  Strategy strategy = Strategy::Ddp;
  Precision precision = Precision::F32;
  std::string optimizer = "adamw";
  double clip = 0;
};

inline DType low(Precision p) { return p == Precision::F16 ? DType::F16 : DType::BF16; }

inline optim::OptimizerOptions optimizer_options(const Config& c) {
  optim::OptimizerOptions oo;
  oo.lr = kStepLr;
  oo.weight_decay = 0.01;
  if (c.optimizer == "sgd") oo.momentum = 0.9;
  return oo;
}

inline StepOptions step_options(const Config& c) {
  StepOptions o;
  o.strategy = c.strategy;
  o.precision = c.precision;
  o.optimizer = c.optimizer;
  o.optimizer_options = optimizer_options(c);
  o.clip_grad_norm = c.clip;
  o.first_bucket_mb = kBuckets.first_bucket_bytes / double(1 << 20);
  o.bucket_mb = kBuckets.bucket_bytes / double(1 << 20);
  return o;
}

// The trainers' loop before apps/trainer/: DDP [+ Zero], [AMP masters + scaler], one optimizer,
// in train_imagenet's order (apps/train/loop.cpp at e25430b).
struct HandWritten {
  dist::Communicator& comm;
  Config c;
  std::shared_ptr<LayersNet> model = std::make_shared<LayersNet>(7 + 100 * comm.rank());
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::Zero> zero;
  std::unique_ptr<optim::MasterWeights> master;
  optim::LossScaler scaler;
  std::unique_ptr<optim::Optimizer> opt;

  HandWritten(dist::Communicator& comm_in, const Config& config) : comm(comm_in), c(config) {
    const bool amp = c.precision != Precision::F32;
    if (amp) cast_for_amp(*model, low(c.precision));
    dist::DdpOptions d;
    d.reducer.bucketing = kBuckets;
    if (trainer::zero_stage(c.strategy) >= 2) d.reducer.collective = dist::Collective::ReduceScatter;
    ddp = std::make_unique<dist::DistributedDataParallel>(model, comm, d);
    if (trainer::is_zero(c.strategy)) zero = std::make_unique<dist::Zero>(*ddp, trainer::zero_stage(c.strategy));
    optim::OptimizerOptions oo = optimizer_options(c);
    if (zero) oo.norm_reduce = zero->sum_reduce();
    if (amp) {
      optim::LossScalerOptions so;
      so.enabled = c.precision == Precision::F16;
      scaler = optim::LossScaler(so);
      master = std::make_unique<optim::MasterWeights>(
          zero ? zero->segments() : optim::segments_from_parameters(model->named_parameters()));
      opt = optim::make_optimizer(c.optimizer, master->master_segments(),
                                  zero ? zero->num_params() : static_cast<int64_t>(master->size()), oo);
    } else if (zero) {
      opt = optim::make_optimizer(c.optimizer, zero->segments(), zero->num_params(), oo);
    } else {
      opt = optim::make_optimizer(c.optimizer, model->named_parameters(), oo);
    }
  }

  // Returns whether the update was applied (fp16 skips a step whose scaled gradients overflow).
  bool step(const Tensor& x, const Tensor& y) {
    opt->set_lr(kStepLr);
    Tensor loss = ops::cross_entropy((*ddp)(master ? ops::cast_raw(x, low(c.precision)) : x), y);
    if (zero) zero->zero_grad(*opt);
    else if (master) opt->zero_grad();
    if (!zero) ddp->reducer().zero_grad();
    (master ? ops::scale(loss, static_cast<float>(scaler.scale())) : loss).backward();
    if (master) {
      optim::AmpStepOptions so;
      so.clip_grad_norm = c.clip;
      so.found_inf_reduce = [this](bool found) { return trainer::any_rank_found_inf(comm, found); };
      if (zero) so.norm_reduce = zero->sum_reduce();
      const bool applied = optim::amp_step(*master, scaler, *opt, zero ? zero->grads() : master->model_grads(), so);
      if (applied && zero) zero->gather_parameters();
      return applied;
    }
    if (c.clip > 0) optim::clip_grad_norm(*opt, c.clip, zero ? zero->sum_reduce() : optim::SumSquaresReduce{});
    opt->step();
    if (zero) zero->gather_parameters();
    return true;
  }

  // The checkpoint's optimizer entries as the trainers assembled them (complete on rank 0).
  optim::NamedTensors state() {
    optim::NamedTensors s = zero ? zero->gather_state(*opt) : opt->state();
    if (master) {
      const auto slices = master->state_slices();
      for (auto& [name, t] : zero ? zero->gather_slices(slices) : optim::assemble_state(slices))
        s.emplace_back("amp.master." + name, t);
      for (auto& [name, t] : scaler.state()) s.emplace_back("amp.scaler." + name, t);
    }
    return s;
  }
};

// The same model and seed through the library.
struct WithStep {
  std::shared_ptr<LayersNet> model;
  std::unique_ptr<Step> step;
  WithStep(dist::Communicator& comm, const StepOptions& o, const Step::Restore& restore = {})
      : model(std::make_shared<LayersNet>(7 + 100 * comm.rank())) {
    step = std::make_unique<Step>(model, StepComms(comm), o, restore);
  }
  trainer::StepResult run(const Tensor& x, const Tensor& y) {
    step->set_lr(kStepLr);
    return step->run([&](int) { return ops::cross_entropy(step->forward(x), y); });
  }
};

inline std::string name_of(const Config& c) {
  return std::string(trainer::strategy_name(c.strategy)) + " " + trainer::precision_name(c.precision) + " " +
         c.optimizer + " clip " + std::to_string(c.clip);
}


// the Step equals the trainers' hand-written loop bit for bit: DDP, ZeRO-1/2/3 x f32, bf16, fp16 x SGD, AdamW, LAMB x clipping
inline void check_equals_hand_written(dist::Communicator& comm) {
    const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  for (Strategy s : {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3})
    for (Precision p : {Precision::F32, Precision::BF16, Precision::F16})
      for (const char* opt : {"sgd", "adamw", "lamb"})
        for (double clip : {0.0, 0.5}) {
          const Config c{s, p, opt, clip};
          CAPTURE(name_of(c));
          HandWritten hand(comm, c);
          WithStep lib(comm, step_options(c));
          int applied = 0;
          for (int k = 0; k < kSteps; ++k) {
            const bool hand_applied = hand.step(x, y);
            const trainer::StepResult r = lib.run(x, y);
            CHECK(r.applied == hand_applied);
            CHECK((r.grad_norm >= 0) == (clip > 0 && r.applied));
            applied += r.applied;
          }
          CHECK(applied >= (p == Precision::F16 ? 1 : kSteps));  // fp16 may skip while its scale settles
          // ZeRO-3: both sides' weights whole for the look (collective; nothing elsewhere).
          const dist::FullParameters lib_weights = lib.step->full_parameters();
          const dist::FullParameters hand_weights =
              hand.zero ? hand.zero->full_parameters() : dist::FullParameters(nullptr);
          CHECK(same_bits(*lib.model, *hand.model));
          CHECK(bit_identical(comm, *lib.model));
          const optim::NamedTensors hs = hand.state(), ls = lib.step->state();  // collective under ZeRO
          if (comm.rank() == 0) CHECK(same_state(ls, hs));
          if (comm.rank() != 0 && !trainer::is_zero(s)) CHECK(ls.empty());  // only the root assembles
          CHECK(lib.step->steps_done() == kSteps);
        }
}

// gradient accumulation: 2 micro-batches of b rows == one batch of 2b rows; only the last backward communicates
inline void check_accumulation(dist::Communicator& comm) {
    const Data d = make_data(2 * comm.size() * kBatch);
  // Rank r's 2b rows are [2rb, 2rb + 2b); micro-batch m is [2rb + mb, 2rb + (m + 1)b).
  auto rows = [&](const Tensor& t, int first, int count) {
    return t.slice((2 * comm.rank() + first) * kBatch, (2 * comm.rank() + first + count) * kBatch);
  };
  struct Case {
    Strategy strategy;
    Precision precision;
    const char* optimizer;
    double bound;  // max_rel_diff (f32) or max_tensor_rel_diff (16-bit)
  };
  for (const Case& k : {Case{Strategy::Ddp, Precision::F32, "sgd", 1e-5}, Case{Strategy::Zero1, Precision::F32, "sgd", 1e-5},
                        Case{Strategy::ParameterServer, Precision::F32, "sgd", 1e-5},
                        Case{Strategy::Ddp, Precision::BF16, "sgd", 3e-2}}) {
    const Config c{k.strategy, k.precision, k.optimizer, 0};
    CAPTURE(name_of(c));
    StepOptions accumulated = step_options(c), whole = step_options(c);
    accumulated.grad_accum_steps = 2;
    WithStep a(comm, accumulated), b(comm, whole);
    for (int step = 0; step < kSteps; ++step) {
      a.step->set_lr(kStepLr);
      const trainer::StepResult ra = a.step->run(
          [&](int micro) { return ops::cross_entropy(a.step->forward(rows(d.x, micro, 1)), rows(d.y, micro, 1)); });
      const trainer::StepResult rb = b.run(rows(d.x, 0, 2), rows(d.y, 0, 2));
      CHECK(ra.applied);
      // The reported loss is the micro-batches' mean, the whole batch's loss up to rounding.
      CHECK(ra.loss.item() == doctest::Approx(rb.loss.item()).epsilon(k.precision == Precision::F32 ? 1e-5 : 2e-2));
    }
    const double diff = k.precision == Precision::F32 ? max_rel_diff(*a.model, *b.model)
                                                      : max_tensor_rel_diff(*a.model, *b.model);
    if (comm.rank() == 0) MESSAGE(name_of(c), ": accumulated vs whole batch ", diff);
    CHECK(diff <= k.bound);
    CHECK(bit_identical(comm, *a.model));
    if (k.strategy != Strategy::ParameterServer)  // the parameter server does not use DDP's collectives
      CHECK(a.step->timeline().steps().size() == kSteps);
  }
}

// the hand-run form (zero_grad, backward per micro-batch, update) equals run() and checks its calls
inline void check_hand_run_form(dist::Communicator& comm) {
    const Data d = make_data(2 * comm.size() * kBatch);
  const Tensor x = d.x.slice(2 * comm.rank() * kBatch, (2 * comm.rank() + 2) * kBatch);
  const Tensor y = d.y.slice(2 * comm.rank() * kBatch, (2 * comm.rank() + 2) * kBatch);
  StepOptions o = step_options(Config{Strategy::Zero1, Precision::BF16, "adamw", 0.5});
  o.grad_accum_steps = 2;
  WithStep a(comm, o), b(comm, o);
  for (int k = 0; k < kSteps; ++k) {
    a.step->set_lr(kStepLr);
    a.step->run([&](int m) { return ops::cross_entropy(a.step->forward(x.slice(m * kBatch, (m + 1) * kBatch)),
                                                       y.slice(m * kBatch, (m + 1) * kBatch)); });
    b.step->set_lr(kStepLr);
    b.step->zero_grad();
    for (int m = 0; m < 2; ++m)
      b.step->backward(ops::cross_entropy(b.step->forward(x.slice(m * kBatch, (m + 1) * kBatch)),
                                          y.slice(m * kBatch, (m + 1) * kBatch)));
    CHECK(b.step->update().applied);
  }
  CHECK(same_bits(*a.model, *b.model));
  // One micro-batch short, or one too many: refused with the option's name.
  b.step->zero_grad();
  b.step->backward(ops::cross_entropy(b.step->forward(x.slice(0, kBatch)), y.slice(0, kBatch)));
  CHECK_THROWS_WITH_AS(b.step->update(), doctest::Contains("StepOptions::grad_accum_steps"), Error);
}

// state() under ZeRO-2 + bf16, restored through the Step into DDP + bf16, continues the run
inline void check_resume_zero2_to_ddp(dist::Communicator& comm, const std::string& dir) {
    const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, 0), y = rank_rows(d.y, 0);  // the same rows on every rank (see the top)
  const std::string path = dir + "_np" + std::to_string(comm.size()) + ".safetensors";
  const Config sharded{Strategy::Zero2, Precision::BF16, "adamw", 0}, plain{Strategy::Ddp, Precision::BF16, "adamw", 0};
  WithStep whole(comm, step_options(sharded));
  for (int k = 0; k < 4; ++k) whole.run(x, y);
  WithStep first(comm, step_options(sharded));
  for (int k = 0; k < 2; ++k) first.run(x, y);
  const optim::NamedTensors state = first.step->state();  // collective; complete on rank 0
  if (comm.rank() == 0) {
    bool masters = false;
    for (auto& [name, t] : state) masters = masters || (name.rfind("amp.master.", 0) == 0 && t.dtype() == DType::F32);
    CHECK(masters);
  }
  save_on_rank0(comm, path, *first.model, state);
  WithStep second(comm, step_options(plain), [&](Module& m) { return load_checkpoint(path, m).optimizer; });
  for (int k = 0; k < 2; ++k) second.run(x, y);
  CHECK(same_bits(*second.model, *whole.model));
  CHECK(bit_identical(comm, *second.model));
  const optim::NamedTensors end = second.step->state(), whole_end = whole.step->state();
  if (comm.rank() == 0) CHECK(same_state(end, whole_end));
}

// a NaN loss on one rank: skip drops the update on every rank, stop stops every rank
inline void check_nan_loss(dist::Communicator& comm) {
    const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  const int bad = comm.size() - 1;
  for (trainer::OnNonfinite policy : {trainer::OnNonfinite::Skip, trainer::OnNonfinite::Stop}) {
    StepOptions o = step_options(Config{Strategy::Zero1, Precision::F32, "sgd", 0});
    o.on_nonfinite = policy;
    WithStep s(comm, o);
    s.run(x, y);
    const std::string before = host_bytes(s.model->parameters().front());
    auto nan_on_bad = [&](int) {
      Tensor loss = ops::cross_entropy(s.step->forward(x), y);
      return comm.rank() == bad ? ops::scale(loss, NAN) : loss;
    };
    s.step->set_lr(kStepLr);
    if (policy == trainer::OnNonfinite::Skip) {
      const trainer::StepResult r = s.step->run(nan_on_bad);
      CHECK_FALSE(r.applied);
      CHECK(r.skipped == trainer::StepResult::Skip::NonfiniteLoss);
      CHECK(host_bytes(s.model->parameters().front()) == before);
      CHECK(s.run(x, y).applied);  // the next clean step applies everywhere
      CHECK(host_bytes(s.model->parameters().front()) != before);
      CHECK(s.step->steps_done() == 3);  // the skipped step still counts
    } else {
      CHECK_THROWS_AS(s.step->run(nan_on_bad), trainer::RunStopped);
      CHECK(host_bytes(s.model->parameters().front()) == before);
    }
    CHECK(bit_identical(comm, *s.model));
  }
}

// NaN gradients with finite losses: skip drops the update on every rank, stop stops every rank
inline void check_nan_gradients(dist::Communicator& comm) {
    const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  const int bad = comm.size() - 1;
  for (Strategy strategy : {Strategy::Ddp, Strategy::Zero1}) {
    for (trainer::OnNonfinite policy : {trainer::OnNonfinite::Skip, trainer::OnNonfinite::Stop}) {
      CAPTURE(trainer::strategy_name(strategy));
      StepOptions o = step_options(Config{strategy, Precision::F32, "sgd", 0});
      o.on_nonfinite = policy;
      WithStep s(comm, o);
      s.run(x, y);
      const std::string before = host_bytes(s.model->parameters().front());
      // The hand-run form, with every gradient of one rank made NaN after backward: its loss is finite.
      s.step->set_lr(kStepLr);
      s.step->zero_grad();
      Tensor loss = ops::cross_entropy(s.step->forward(x), y);
      CHECK(std::isfinite(loss.item()));
      s.step->backward(loss);
      if (comm.rank() == bad)
        for (Tensor& p : s.model->parameters()) {
          Tensor g = p.grad();
          ops::fill_(g, NAN);
        }
      if (policy == trainer::OnNonfinite::Skip) {
        const trainer::StepResult r = s.step->update();
        CHECK_FALSE(r.applied);
        CHECK(host_bytes(s.model->parameters().front()) == before);
        CHECK(s.run(x, y).applied);
      } else {
        CHECK_THROWS_AS(s.step->update(), trainer::RunStopped);
        CHECK(host_bytes(s.model->parameters().front()) == before);
      }
      for (const Tensor& p : s.model->parameters()) CHECK(ops::all_finite(p));
      CHECK(bit_identical(comm, *s.model));
    }
  }
}

// weights an update made non-finite stop the next step (skip too) and the run's end; no checkpoint of them
inline void check_nonfinite_weights(dist::Communicator& comm) {
    const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  for (trainer::OnNonfinite policy : {trainer::OnNonfinite::Skip, trainer::OnNonfinite::Stop}) {
    StepOptions o = step_options(Config{Strategy::Ddp, Precision::F32, "sgd", 0});
    o.on_nonfinite = policy;
    WithStep s(comm, o);
    s.run(x, y);
    s.step->set_lr(INFINITY);  // an update that overflows: every weight with a gradient becomes inf or NaN
    s.step->run([&](int) { return ops::cross_entropy(s.step->forward(x), y); });
    CHECK_FALSE(ops::all_finite(s.model->parameters().front()));
    // A skip cannot undo it: both policies stop at the next step, on every rank.
    s.step->set_lr(kStepLr);
    CHECK_THROWS_AS(s.step->run([&](int) { return ops::cross_entropy(s.step->forward(x), y); }), trainer::RunStopped);
  }
  // The end of the run: the last update's weights, which no next step reads.
  {
    StepOptions o = step_options(Config{Strategy::Ddp, Precision::F32, "sgd", 0});
    WithStep s(comm, o);
    s.step->set_lr(INFINITY);
    s.step->run([&](int) { return ops::cross_entropy(s.step->forward(x), y); });
    CHECK_THROWS_AS(s.step->finish(), trainer::RunStopped);
  }
  // A checkpoint of them is refused under every policy, off included; finite state passes.
  for (trainer::OnNonfinite policy : {trainer::OnNonfinite::Off, trainer::OnNonfinite::Skip}) {
    StepOptions o = step_options(Config{Strategy::Zero1, Precision::F32, "adamw", 0});
    o.on_nonfinite = policy;
    WithStep s(comm, o);
    s.run(x, y);
    optim::NamedTensors clean = s.step->state();
    CHECK_NOTHROW(s.step->check_state_finite(clean));
    // NaN in the optimizer state alone (rank 0 holds it all, gathered): refused too.
    if (comm.rank() == 0) {
      Tensor t = clean.front().second;
      ops::fill_(t, NAN);
    }
    CHECK_THROWS_AS(s.step->check_state_finite(clean), trainer::RunStopped);
  }
}

// AMP's found-inf agreement (amp.h any_rank_found_inf over StepComms::control): one rank's overflow
// is every rank's skip. The hand-run form, with one rank's 16-bit gradients made inf after backward.
inline void check_amp_found_inf(dist::Communicator& comm) {
  const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  const int bad = comm.size() - 1;
  for (Strategy strategy : {Strategy::Ddp, Strategy::Zero1}) {
    CAPTURE(trainer::strategy_name(strategy));
    WithStep s(comm, step_options(Config{strategy, Precision::F16, "sgd", 0}));
    s.run(x, y);  // may itself skip while the scale settles: what follows reads the scale after it
    const std::string before = host_bytes(s.model->parameters().front());
    const double scale = s.step->loss_scale();
    s.step->set_lr(kStepLr);
    s.step->zero_grad();
    Tensor loss = ops::cross_entropy(s.step->forward(x), y);
    CHECK(std::isfinite(loss.item()));
    s.step->backward(loss);
    if (comm.rank() == bad)
      for (Tensor& p : s.model->parameters()) {
        Tensor g = p.grad();
        ops::fill_(g, INFINITY);
      }
    const trainer::StepResult r = s.step->update();
    CHECK_FALSE(r.applied);
    CHECK(r.skipped == trainer::StepResult::Skip::NonfiniteGradients);
    CHECK(host_bytes(s.model->parameters().front()) == before);
    CHECK(s.step->loss_scale() == scale / 2);  // every rank backed off, not only the one that overflowed
    CHECK(bit_identical(comm, *s.model));
  }
}

// The EMA the Step updates (Step::set_ema) equals one updated by hand after each applied step; a
// skipped step (a NaN loss under skip) leaves it alone.
inline void check_ema(dist::Communicator& comm) {
  const Data d = make_data(comm.size() * kBatch);
  const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
  StepOptions o = step_options(Config{Strategy::Zero1, Precision::BF16, "adamw", 0});
  o.on_nonfinite = trainer::OnNonfinite::Skip;
  WithStep s(comm, o);
  trainer::ModelEma by_step(*s.model, 0.9), by_hand(*s.model, 0.9);
  s.step->set_ema(&by_step);
  const optim::NamedTensors start = by_hand.state();
  for (int k = 0; k < kSteps; ++k) {
    const bool nan = k == 1;
    s.step->set_lr(kStepLr);
    const trainer::StepResult r = s.step->run([&](int) {
      Tensor loss = ops::cross_entropy(s.step->forward(x), y);
      return nan ? ops::scale(loss, NAN) : loss;
    });
    CHECK(r.applied == !nan);
    if (r.applied) by_hand.update();
  }
  CHECK(same_state(by_step.state(), by_hand.state()));
  CHECK_FALSE(same_state(by_step.state(), start));  // it moved
}

// TP (see the top). Needs an even world: at 1 rank there is nothing to split, and the body returns.
inline void check_tp(dist::Communicator& comm, const std::string& dir) {
  namespace tpf = tandem::testing::tp_fixture;
  if (comm.size() % 2 != 0) return;
  const BertConfig cfg = tpf::tp_config();
  auto options = [](Strategy strategy, int tp) {
    StepOptions o;
    o.strategy = strategy, o.tp = tp, o.optimizer = "adamw", o.clip_grad_norm = 0.5;
    o.optimizer_options.lr = tpf::kLr;
    o.first_bucket_mb = 4096.0 / (1 << 20), o.bucket_mb = 16384.0 / (1 << 20);  // several buckets, as GridRun's
    return o;
  };
  auto batch = [](int dp_rank, int dp_size) {
    const int64_t per = tpf::kGridBatch / dp_size;
    return encoder_fixture::rows(encoder_fixture::full_batch(tpf::kGridBatch), dp_rank * per, per);
  };
  auto train = [&](Step& step, auto& model, const encoder_fixture::MlmBatch& b, std::vector<double>& norms,
                   int steps = tpf::kSteps) {
    std::vector<double> losses;
    for (int k = 0; k < steps; ++k) {
      step.set_lr(tpf::kLr);
      const trainer::StepResult r = step.run([&](int) {
        return step.forward_with([&](Module&) { return model->mlm_loss(b.ids, b.mask, b.types, b.labels); });
      });
      CHECK(r.applied);
      norms.push_back(r.grad_norm);
      Tensor l = r.loss.detach().to(Device::cpu()).clone();
      comm.all_reduce(l, dist::ReduceOp::Avg, "tp test loss")->wait();  // the mean over every rank
      losses.push_back(l.to_vector_f64()[0]);
    }
    return losses;
  };
  auto canonical = std::make_shared<models::BertForMaskedLM>(cfg, 7);
  canonical->to(DType::F64);
  Step base(canonical, StepComms(comm), options(Strategy::Ddp, 1));
  std::vector<double> want_norms;
  const std::vector<double> want_losses = train(base, canonical, batch(comm.rank(), comm.size()), want_norms);
  auto copied = [](NamedTensors s) {  // state_dict() and state() may share the live tensors
    for (auto& [name, t] : s) t = t.to(Device::cpu()).clone();
    return s;
  };
  const NamedTensors want = copied(state_dict(*canonical));
  const NamedTensors want_state = copied(base.state());  // rank 0's (DDP)
  for (Strategy strategy : {Strategy::Ddp, Strategy::Zero1}) {
    CAPTURE(trainer::strategy_name(strategy));
    dist::tp::Grid grid(comm, 2);
    auto model = std::make_shared<dist::tp::TpBertForMaskedLM>(cfg, grid.tp(), 7);
    model->to(DType::F64);
    Step step(model, StepComms(grid.dp(), comm), options(strategy, 2), {},
              TpParts{&grid.tp(), dist::tp::bert_tp_layout(cfg)});
    std::vector<double> norms;
    const std::vector<double> losses = train(step, model, batch(grid.dp_rank(), grid.dp_size()), norms);
    for (int k = 0; k < tpf::kSteps; ++k) {
      CHECK(losses[k] == doctest::Approx(want_losses[k]).epsilon(1e-12));
      CHECK(norms[k] == doctest::Approx(want_norms[k]).epsilon(1e-12));  // clip_tp: the canonical model's norm
    }
    const NamedTensors got = tpf::canonical_params(*model);
    CHECK(max_named_rel_diff(got, want, tpf::key_bias) <= 1e-10);
    CHECK(tpf::replicas_identical(*model));
    CHECK(bit_identical(grid.dp(), *model));
    // The checkpoint: state() assembled over the TP group (collective), the weights by the model on
    // each TP group's rank 0; rank 0 writes both.
    const optim::NamedTensors state = step.state();
    // The moments to 1e-7, not 1e-10: they are running sums of the gradients, which differ from the
    // unsplit model's by 5.3e-8 relative here (measured at 2 and 4 ranks, with clipping and without),
    // more than AdamW's normalised update lets through to the weights. A state entry assembled
    // wrong (another shard, another order) would differ by O(1).
    if (comm.rank() == 0) CHECK(max_named_rel_diff(state, want_state, tpf::key_bias) <= 1e-7);
    const std::string path = dir + "_tp_" + trainer::strategy_name(strategy) + "_np" +
                             std::to_string(comm.size()) + ".safetensors";
    int used = 0;
    model->with_canonical([&](const Module& whole) {
      ++used;
      CHECK(max_named_rel_diff(state_dict(whole), want, tpf::key_bias) <= 1e-10);
      if (comm.rank() == 0) {
        std::filesystem::create_directories(std::filesystem::path(path).parent_path());
        save_checkpoint(path, whole, state, TrainState{});
      }
    });
    CHECK(used == (grid.tp_rank() == 0 ? 1 : 0));
    dist::all_gather_strings(comm, "saved");  // a barrier: the file exists before anyone reads it
    auto resumed = std::make_shared<dist::tp::TpBertForMaskedLM>(cfg, grid.tp(), 7, dist::tp::TpBertOptions{}, false);
    resumed->to(DType::F64);
    Step again(resumed, StepComms(grid.dp(), comm), options(strategy, 2), [&](Module& m) {
      Checkpoint ck = read_checkpoint(path);
      load_state_dict(m, resumed->local_state_dict(ck.model));
      return ck.optimizer;  // canonical: the Step takes its shard
    }, TpParts{&grid.tp(), dist::tp::bert_tp_layout(cfg)});
    // The round trip is copies only: the same weights and state() bit for bit, and under DDP the
    // same next step. (A ZeRO-1 Step restored from its own state() drifts ~1e-8 from the
    // uninterrupted one at the next step in f64, with or without TP: ZeRO's, not the checkpoint's.)
    CHECK(tpf::same_bits(tpf::canonical_params(*resumed), tpf::canonical_params(*model)));
    const optim::NamedTensors again_state = again.state();
    if (comm.rank() == 0) CHECK(tpf::same_bits(again_state, state));
    if (strategy == Strategy::Ddp) {
      std::vector<double> again_norms;
      train(step, model, batch(grid.dp_rank(), grid.dp_size()), norms, 1);
      train(again, resumed, batch(grid.dp_rank(), grid.dp_size()), again_norms, 1);
      CHECK(again_norms.back() == norms.back());
      CHECK(tpf::same_bits(tpf::canonical_params(*resumed), tpf::canonical_params(*model)));
    }
  }
}

// combinations that cannot work are refused when the Step is built, naming the option
inline void check_refusals(dist::Communicator& comm) {
  auto refused = [&comm](const StepOptions& o, const std::string& words) {
    auto model = std::make_shared<LayersNet>(7);
    CHECK_THROWS_WITH_AS(Step(model, StepComms(comm), o), doctest::Contains(words.c_str()), Error);
  };
  StepOptions graph;
  graph.cuda_graph = true, graph.on_nonfinite = trainer::OnNonfinite::Off;
  refused(graph, "StepOptions::cuda_graph needs a GPU, and this run is on the CPU");
  StepOptions ps;
  ps.strategy = Strategy::ParameterServer, ps.precision = Precision::BF16;
  refused(ps, "StepOptions::strategy = ps updates f32 parameters on its servers");
  StepOptions accum;
  accum.strategy = Strategy::Zero2, accum.grad_accum_steps = 2;
  refused(accum, "StepOptions::grad_accum_steps = 2 with StepOptions::strategy = zero2 is not supported");
}

}  // namespace tandem::testing::step_cases
