// tests/mpi_encoder_ddp.cpp: DistributedDataParallel on the BERT encoder (BertForMaskedLM), against
// one process on the full batch, run under mpiexec -n 2 and -n 4.
//
// The experiment of tests/mpi_ddp.cpp with a multi-input model: each rank takes batch b of a full
// batch of N*b sequences, runs mlm_loss through DistributedDataParallel::forward_with (ids, padding
// mask, token types, labels), and after K steps its parameters must equal those of one process that
// trained on all N*b sequences (which every rank also trains itself). For the mean over ranks of the
// per-rank losses to be the full batch's loss, every sequence has the same number of labelled
// (masked) positions: mlm_loss averages over labelled positions, not sequences. Dropout is 0, so both
// sides compute the same function. The replicas start from different seeds: DDP must broadcast
// rank 0's weights.
// Tolerance 1e-5 relative in f32 (max over elements of |a - b| / max(|b|, 1e-3), as mpi_ddp): the
// two sides sum the same products in a different order (per-rank partial sums, then the
// all-reduce), a few ulps per step over K = 3 steps of SGD.
// AdamW (the trainer's optimizer) is checked on the gradients instead of the weights: its update
// g / (sqrt(v) + eps) is ~lr * sign(g) for every element at the first step, so an element whose
// gradient is rounding noise on both sides (the key bias's is exactly 0 in exact arithmetic: softmax
// ignores a shift shared by all keys) moves by +-lr either way, and weight differences of 1e-4 after
// 3 steps say nothing about DDP. So at every AdamW step the reference is set to the replica's
// weights and its full-batch gradient must equal the replica's averaged one.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "layers/models/bert.h"
#include "checkpoint/state_dict.h"
#include "optim/optimizer.h"
#include "tests/support/ddp_fixture.h"
#include "tests/support/encoder_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using tandem::testing::ddp_fixture::bit_identical;
using tandem::testing::ddp_fixture::max_rel_diff;
using namespace tandem::testing::encoder_fixture;

namespace {

constexpr int64_t kB = 2;  // sequences per rank
constexpr int kSteps = 3;

using Batch = MlmBatch;

// One experiment's inputs and models: the full batch, this rank's rows, the reference (seed 7) and
// the replica (seed 7 + 100 rank, before DDP's broadcast).
struct Setup {
  Batch all, mine;
  std::shared_ptr<models::BertForMaskedLM> ref, model;
  Setup() {
    const World& w = world();
    all = full_batch(w.size * kB);
    mine = rows(all, w.rank * kB, kB);
    ref = std::make_shared<models::BertForMaskedLM>(tiny_config(), 7);
    model = std::make_shared<models::BertForMaskedLM>(tiny_config(), 7 + 100 * w.rank);
  }
};

struct Trained {
  std::shared_ptr<models::BertForMaskedLM> model, ref;
};

Trained train(const std::string& optimizer, const ReducerOptions& ro) {
  Setup x;
  const Batch &all = x.all, &mine = x.mine;
  auto ref = x.ref, model = x.model;
  DdpOptions o;
  o.reducer = ro;
  DistributedDataParallel ddp(model, dist::comm_for(Device::cpu()), o);
  optim::OptimizerOptions oo;
  oo.lr = optimizer == "sgd" ? 0.1 : 1e-2;
  auto opt = optim::make_optimizer(optimizer, model->named_parameters(), oo);
  auto ref_opt = optim::make_optimizer(optimizer, ref->named_parameters(), oo);
  for (int step = 0; step < kSteps; ++step) {
    opt->zero_grad();
    Tensor loss =
        ddp.forward_with([&](Module&) { return model->mlm_loss(mine.ids, mine.mask, mine.types, mine.labels); });
    loss.backward();
    opt->step();
    ref_opt->zero_grad();
    ref->mlm_loss(all.ids, all.mask, all.types, all.labels).backward();
    ref_opt->step();
  }
  CHECK(ddp.timeline().steps().size() == kSteps);  // forward_with started a reducer step each time
  return {model, ref};
}

}  // namespace

TEST_CASE("encoder: N ranks x batch b == 1 process x batch N*b after K SGD steps; ranks stay bit-identical") {
  for (bool overlap : {true, false}) {
    CAPTURE(overlap);
    ReducerOptions ro;
    ro.bucketing = {4096, 16384};  // several buckets in this small model
    ro.overlap = overlap;
    Trained t = train("sgd", ro);
    CHECK(max_rel_diff(*t.model, *t.ref) <= 1e-5);
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *t.model));
  }
  Trained t = train("sgd", {});  // default bucket sizes: the whole model in one bucket
  CHECK(max_rel_diff(*t.model, *t.ref) <= 1e-5);
  CHECK(bit_identical(dist::comm_for(Device::cpu()), *t.model));
}

TEST_CASE("encoder with AdamW: each step's averaged gradient == the full batch's at the same weights") {
  Setup x;
  const Batch &all = x.all, &mine = x.mine;
  auto ref = x.ref, model = x.model;
  DdpOptions o;
  o.reducer.bucketing = {4096, 16384};
  DistributedDataParallel ddp(model, dist::comm_for(Device::cpu()), o);
  optim::OptimizerOptions oo;
  oo.lr = 1e-2;
  auto opt = optim::make_optimizer("adamw", model->named_parameters(), oo);
  for (int step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    load_state_dict(*ref, state_dict(*model));  // the reference evaluates at the replica's weights
    for (Tensor& p : ref->parameters())
      if (p.grad().defined()) p.grad().zero_();
    ref->mlm_loss(all.ids, all.mask, all.types, all.labels).backward();
    opt->zero_grad();
    ddp.forward_with([&](Module&) { return model->mlm_loss(mine.ids, mine.mask, mine.types, mine.labels); })
        .backward();
    // Rounding scales with the summed terms, bounded by the largest gradients, not with each result
    // (some are 0 in exact arithmetic): elements are compared relative to max(|ref|, 1e-2 * max|ref|).
    // A DDP fault (a missed or stale bucket, a wrong average) is off by O(1) on the largest elements.
    auto pa = model->named_parameters(), pb = ref->named_parameters();
    double gmax = 0, worst = 0;
    for (auto& [name, p] : pb)
      for (float g : p.grad().to_vector()) gmax = std::max(gmax, double(std::abs(g)));
    for (size_t i = 0; i < pa.size(); ++i) {
      std::vector<float> a = pa[i].second.grad().to_vector(), b = pb[i].second.grad().to_vector();
      for (size_t j = 0; j < a.size(); ++j)
        worst = std::max(worst, std::abs(double(a[j]) - b[j]) / std::max(double(std::abs(b[j])), 1e-2 * gmax));
    }
    CHECK(worst <= 1e-5);
    opt->step();
  }
  CHECK(bit_identical(dist::comm_for(Device::cpu()), *model));
  CHECK(bit_identical(dist::comm_for(Device::cpu()), *model, true));  // and the gradients they stepped with
}
