// tests/mpi_tp.cpp: tensor parallelism over MPI, under mpiexec -n 2 and -n 4 - the sub-communicators
// of Communicator::split on the MPI backend, and the TP experiments of tests/test_tp_bert.cpp and
// tests/test_tp_grid.cpp with a process per rank:
//   - split: groups by colour ranked by key, collectives confined to a group, splits of splits;
//   - TP = N (the whole world) == one process: 5 AdamW steps in f64, 1e-10 relative per tensor;
//   - TP 2 x DP N/2 == DDP N (at -n 2, TP 2 x DP 1 against DDP 2), f64, and ZeRO-1/2 over the DP
//     groups with the TP shards as parameters;
//   - gathered checkpoints: every rank of a TP group gets the canonical tensors.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/tp/grid.h"
#include "dist/tp/shard.h"
#include "dist/transport/bootstrap.h"
#include "tests/support/tp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::dist::tp;
using namespace tandem::testing::tp_fixture;

namespace {
Communicator& world_comm() { return comm_for(Device::cpu()); }
}  // namespace

TEST_CASE("MPI split: colour groups ranked by key; collectives stay inside; splits of splits") {
  Communicator& w = world_comm();
  const int r = w.rank(), n = w.size();
  std::unique_ptr<Communicator> sub = w.split(r % 2, n - r);  // reversed order inside each parity
  const int members = (n + 1 - r % 2) / 2;
  CHECK(sub->size() == members);
  CHECK(sub->rank() == members - 1 - r / 2);
  CHECK(std::string(sub->backend()) == "mpi");
  Tensor t = Tensor::full({5}, r + 1.0);
  sub->all_reduce(t)->wait();
  float want = 0;
  for (int q = r % 2; q < n; q += 2) want += q + 1;
  CHECK(t.to_vector() == std::vector<float>(5, want));
  w.barrier()->wait();  // the parent keeps working
  std::unique_ptr<Communicator> alone = sub->split(sub->rank(), 0);
  CHECK(alone->size() == 1);
  Tensor u = Tensor::full({2}, 3.0);
  alone->all_reduce(u)->wait();
  CHECK(u.to_vector() == std::vector<float>(2, 3.0f));
  Grid g(w, 2);
  CHECK(g.tp_rank() == r % 2);
  CHECK(g.dp_rank() == r / 2);
  Tensor me = Tensor::full({1}, r, DType::I64), tps = Tensor::empty({2}, DType::I64);
  g.tp().all_gather(me, tps)->wait();
  CHECK(tps.to_vector_i64() == std::vector<int64_t>{r / 2 * 2, r / 2 * 2 + 1});
}

TEST_CASE("MPI: TP N == one process, 5 AdamW steps in f64; gathered checkpoints on every rank") {
  Communicator& w = world_comm();
  const BertConfig cfg = tp_config();
  const MlmBatch b = full_batch(4);
  const Reference ref = train_reference(cfg, b, DType::F64, kSteps);
  Trained t = train_tp(cfg, b, DType::F64, kSteps, w);
  for (int s = 0; s < kSteps; ++s) CHECK(t.losses[s] == doctest::Approx(ref.losses[s]).epsilon(1e-12));
  const NamedTensors got = canonical_params(*t.model);  // an all_gather: every rank gets them
  const double d = max_named_rel_diff(got, ref.params, key_bias);
  if (w.rank() == 0) MESSAGE("MPI TP ", w.size(), " vs one process, f64: max relative difference per tensor ", d);
  CHECK(d <= 1e-10);
  CHECK(key_bias_max(got) < 1e-12);
  CHECK(replicas_identical(*t.model));
  CHECK(max_named_rel_diff(gather_state_dict(t.opt->state(), bert_tp_layout(cfg), w), ref.state, key_bias) <= 1e-10);
}

TEST_CASE("MPI: TP 2 x DP N/2 == DDP N (f64, 5 AdamW steps); ZeRO-1 and ZeRO-2 over the DP groups") {
  Communicator& w = world_comm();
  GridRun ddp(w, 1, 0, DType::F64), tp2(w, 2, 0, DType::F64), z1(w, 2, 1, DType::F64), z2(w, 2, 2, DType::F64);
  for (int s = 0; s < kSteps; ++s) {
    const double a = ddp.step();
    for (GridRun* x : {&tp2, &z1, &z2}) CHECK(x->step() == doctest::Approx(a).epsilon(1e-12));
  }
  const NamedTensors want = ddp.canonical();
  for (GridRun* x : {&tp2, &z1, &z2}) {
    const double d = max_named_rel_diff(x->canonical(), want, key_bias);
    if (w.rank() == 0)
      MESSAGE("MPI TP 2 x DP ", w.size() / 2, (x->zero ? " ZeRO-" + std::to_string(x->zero->stage()) : std::string()),
              " vs DDP ", w.size(), ", f64: max relative difference per tensor ", d);
    CHECK(d <= 1e-10);
    CHECK(bit_identical(x->grid->dp(), *x->model));
    CHECK(replicas_identical(static_cast<TpBertForMaskedLM&>(*x->model)));
  }
}
