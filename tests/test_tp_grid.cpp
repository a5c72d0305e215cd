// tests/test_tp_grid.cpp: tensor parallelism on the 2-D grid (dist/tp/grid.h) with data parallelism
// over the DP groups - DDP and ZeRO-1/2 with the TP shards as their parameters - against plain DDP
// on the whole world, 4 ranks as threads. tests/mpi_tp.cpp runs the same over MPI.
//
// The experiment: a batch of 8 sequences. DDP 4: rank r trains on sequences [2r, 2r + 2). TP 2 x
// DP 2: the two ranks of DP group d hold the two halves of the model and train on sequences
// [4d, 4d + 4) together. Every sequence has the same number of labelled positions, so both sides
// average the same per-token losses (encoder_fixture.h). Then:
//   - f64, 5 AdamW steps: every canonical parameter within 1e-10 relative per tensor of DDP 4's
//     (the issue asks 1e-5; only the summation order differs), loss by loss;
//   - f32: at every step, the gradients at the same weights within 1e-5 relative per tensor, and
//     the weights after 5 steps reported (AdamW amplifies f32 rounding: tp_fixture.h);
//   - ZeRO-1 and ZeRO-2 over the DP groups take the same steps as DDP over them (1e-10, f64);
//   - the replicated parameters stay bit-identical inside each TP group, and every parameter
//     bit-identical across each DP group (the all-reduce hands every rank the same bits).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/tp/bert.h"
#include "dist/tp/shard.h"
#include "dist/transport/comm_thread.h"
#include "layers/models/bert.h"
#include "optim/optimizer.h"
#include "tests/support/tp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::dist::tp;
using namespace tandem::testing::tp_fixture;


TEST_CASE("TP 2 x DP 2 == DDP 4: every canonical parameter after 5 AdamW steps (f64); ranks bit-identical") {
  run_ranks(4, [](Communicator& world) {
    GridRun ddp4(world, 1, 0, DType::F64), tp2(world, 2, 0, DType::F64);
    for (int s = 0; s < kSteps; ++s) {
      const double a = ddp4.step(), b = tp2.step();
      CHECK(b == doctest::Approx(a).epsilon(1e-12));
    }
    const NamedTensors want = ddp4.canonical(), got = tp2.canonical();
    const double d = max_named_rel_diff(got, want, key_bias);
    if (world.rank() == 0) MESSAGE("TP 2 x DP 2 vs DDP 4, f64, 5 AdamW steps: max relative difference per tensor ", d);
    CHECK(d <= 1e-10);
    CHECK(key_bias_max(got) < 1e-12);
    CHECK(replicas_identical(static_cast<TpBertForMaskedLM&>(*tp2.model)));
    CHECK(bit_identical(tp2.grid->dp(), *tp2.model));
  });
}

TEST_CASE("TP 2 x DP 2 == DDP 4 in f32: every step's gradients at the same weights; the weights after 5 steps") {
  // For scale, the same weight measure between DDP 4 and one process on the whole batch: plain
  // data parallelism drifts from one process by as much in f32 (8e-5 when this was written).
  const Reference one = train_reference(tp_config(), full_batch(kGridBatch), DType::F32, kSteps);
  run_ranks(4, [&](Communicator& world) {
    GridRun tp2(world, 2, 0, DType::F32), at(world, 1, 0, DType::F32), ddp4(world, 1, 0, DType::F32);
    double worst = 0;
    for (int s = 0; s < kSteps; ++s) {
      load_state_dict(*at.model, tp2.canonical());  // DDP 4 evaluated at TP x DP's weights
      const double want_loss = at.backward(), loss = tp2.backward();
      CHECK(loss == doctest::Approx(want_loss).epsilon(1e-6));
      const NamedTensors g = tp2.grads();
      worst = std::max(worst, max_named_rel_diff(g, at.grads(), key_bias));
      CHECK(key_bias_max(g) < 1e-6);
      tp2.update();
      ddp4.step();  // trained on its own, for the weights after 5 steps
    }
    const double d = max_named_rel_diff(tp2.canonical(), ddp4.canonical(), key_bias);
    const double ddp_drift = max_named_rel_diff(ddp4.canonical(), one.params, key_bias);
    if (world.rank() == 0)
      MESSAGE("TP 2 x DP 2 vs DDP 4, f32: gradients at most ", worst, " relative per tensor at every step; weights "
              "after 5 AdamW steps ", d, " (DDP 4 vs one process: ", ddp_drift, ")");
    CHECK(worst <= 1e-5);
    CHECK(d <= 1e-3);
  });
}

TEST_CASE("ZeRO-1 and ZeRO-2 over the DP groups == DDP over them, with TP 2 shards as the parameters (f64)") {
  run_ranks(4, [](Communicator& world) {
    GridRun ddp(world, 2, 0, DType::F64), z1(world, 2, 1, DType::F64), z2(world, 2, 2, DType::F64);
    for (int s = 0; s < kSteps; ++s) {
      const double a = ddp.step(), b = z1.step(), c = z2.step();
      CHECK(b == doctest::Approx(a).epsilon(1e-12));
      CHECK(c == doctest::Approx(a).epsilon(1e-12));
    }
    const NamedTensors want = ddp.canonical();
    for (GridRun* z : {&z1, &z2}) {
      CHECK(max_named_rel_diff(z->canonical(), want, key_bias) <= 1e-10);
      CHECK(bit_identical(z->grid->dp(), *z->model));  // every element has one owner whose value all copy
      CHECK(replicas_identical(static_cast<TpBertForMaskedLM&>(*z->model)));
    }
  });
}

