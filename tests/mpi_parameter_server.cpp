// tests/mpi_parameter_server.cpp: the synchronous parameter server against DDP (dist/extras/parameter_server.h).
//
// Both sides train the fixture's SmallCnn for kSteps on this rank's rows of the same batch: DDP with
// the optimizer on every rank, the parameter server with K servers (K = 1, 2) that alone run it.
// Tolerance 1e-5 relative in f32 (max_rel_diff): both divide the same sum by N, but the sum is formed
// by a different collective (reduce to a root vs all-reduce), so its order may differ by a few ulps.
// After every pull, all ranks must hold bit-identical parameters. With a no-decay rule (the biases)
// the servers' second optimizer (weight decay 0) matches DDP's two optimizers the same way, and a
// strong decay shows that the rule acts (without it the biases would differ by far more than 1e-5).
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "dist/extras/parameter_server.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::ddp_fixture;

namespace {

optim::OptimizerOptions options_for(const std::string& name) {
  optim::OptimizerOptions o;
  // AdamW at its default lr 1e-3: its normalised update m/sqrt(v) turns an ulp of difference in a
  // near-zero gradient sum into a full-size step difference, so a larger lr only scales that noise
  // (at 1e-2 the K = 2, 4-rank case reaches 1e-5 itself; the summation order is all that differs).
  o.lr = name == "sgd" ? 0.1 : 1e-3;
  if (name == "sgd") o.momentum = 0.9, o.weight_decay = 1e-4;  // momentum state lives on the servers
  return o;
}

bool is_bias(const std::string& name) { return name.size() > 5 && name.substr(name.size() - 5) == ".bias"; }

// kSteps of DDP (optimizer on every rank) and of the parameter server (optimizer on the servers).
// groups: the biases train without weight decay (DDP: a second optimizer; PS: PsOptions::no_decay),
// the rest with a weight decay strong enough to show.
void check_ps_equals_ddp(const std::string& opt_name, int servers, bool groups = false) {
  CAPTURE(opt_name);
  CAPTURE(servers);
  CAPTURE(groups);
  const World& w = world();
  Data d = make_data(w.size * kBatch);
  Tensor xs = rank_rows(d.x, w.rank), ys = rank_rows(d.y, w.rank);

  auto ddp_model = std::make_shared<SmallCnn>(7 + 100 * w.rank);
  DistributedDataParallel ddp(ddp_model, dist::comm_for(Device::cpu()));
  optim::OptimizerOptions opts = options_for(opt_name);
  if (groups) opts.weight_decay = 0.05;
  optim::NamedTensors decay, no_decay;
  for (auto& [name, p] : ddp_model->named_parameters()) (groups && is_bias(name) ? no_decay : decay).emplace_back(name, p);
  auto ddp_opt = optim::make_optimizer(opt_name, decay, opts);
  optim::OptimizerOptions without = opts;
  without.weight_decay = 0.0;
  auto ddp_no_decay = optim::make_optimizer(opt_name, no_decay, without);

  auto ps_model = std::make_shared<SmallCnn>(7 + 100 * w.rank);  // different per rank: PS must broadcast
  PsOptions po;
  po.servers = servers;
  po.optimizer = opt_name;
  po.optimizer_options = opts;
  if (groups) po.no_decay = is_bias;
  ParameterServer ps(ps_model->named_parameters(), comm_for(Device::cpu()), po);
  CHECK(ps.is_server() == (w.rank < servers));
  CHECK((ps.no_decay_optimizer() != nullptr) == (groups && ps.is_server()));

  for (int step = 0; step < kSteps; ++step) {
    ddp_opt->zero_grad();
    ddp_no_decay->zero_grad();
    ops::cross_entropy(ddp(xs), ys).backward();
    ddp_opt->step();
    ddp_no_decay->step();
    zero_grads(*ps_model);
    ops::cross_entropy((*ps_model)(xs), ys).backward();
    ps.step();
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *ps_model));  // after every pull, not only at the end
  }
  const double diff = max_rel_diff(*ps_model, *ddp_model);
  if (w.rank == 0) MESSAGE(opt_name, ", K = ", servers, std::string(groups ? " (two groups)" : ""), ": max relative diff PS vs DDP ", diff);
  CHECK(diff <= 1e-5);
}

}  // namespace

TEST_CASE("Communicator::reduce: the root gets the sum over ranks, the others keep their values") {
  const World& w = world();
  for (int root = 0; root < w.size; ++root) {
    CAPTURE(root);
    Tensor t = Tensor::from_vector({float(w.rank + 1), float(10 * (w.rank + 1))}, {2});
    comm_for(Device::cpu()).reduce(t, root, ReduceOp::Sum, "test reduce")->wait();
    const float tri = w.size * (w.size + 1) / 2.0f;  // 1 + 2 + ... + N
    const std::vector<float> v = t.to_vector();
    if (w.rank == root) {
      CHECK(v[0] == tri);
      CHECK(v[1] == 10 * tri);
    } else {
      CHECK(v[0] == float(w.rank + 1));
      CHECK(v[1] == float(10 * (w.rank + 1)));
    }
  }
}

TEST_CASE("assign_partitions: whole tensors, largest first to the least loaded server, deterministic") {
  // 100 -> s0; 60 -> s1; 50 -> s1 (60 < 100); 10 -> s0 (100 < 110); 10 -> s0 (110 = 110: lowest).
  CHECK(assign_partitions({10, 100, 50, 60, 10}, 2) == std::vector<int>{0, 0, 1, 1, 0});
  CHECK(assign_partitions({5, 5, 5}, 1) == std::vector<int>{0, 0, 0});
  CHECK(assign_partitions({3, 3, 3}, 3) == std::vector<int>{0, 1, 2});
  CHECK_THROWS(assign_partitions({1}, 0));
}

TEST_CASE("parameter server == DDP after kSteps (SGD with momentum, AdamW; K = 1 and 2 servers)") {
  for (const char* opt : {"sgd", "adamw"})
    for (int servers : {1, 2})
      if (servers <= world().size) check_ps_equals_ddp(opt, servers);
}

TEST_CASE("parameter server with a no-decay group == DDP with the same two optimizers (K = 1 and 2)") {
  for (const char* opt : {"sgd", "adamw"})
    for (int servers : {1, 2})
      if (servers <= world().size) check_ps_equals_ddp(opt, servers, true);
}

TEST_CASE("push and pull in pieces (PsOptions::piece_bytes) give the bits of whole-partition messages") {
  const World& w = world();
  Data d = make_data(w.size * kBatch);
  Tensor xs = rank_rows(d.x, w.rank), ys = rank_rows(d.y, w.rank);
  std::vector<std::shared_ptr<SmallCnn>> models;
  std::vector<std::unique_ptr<ParameterServer>> servers;
  for (size_t piece : {size_t{1} << 30, size_t{256}}) {  // one piece per partition; many, one ending short
    models.push_back(std::make_shared<SmallCnn>(7 + 100 * w.rank));
    PsOptions po;
    po.servers = std::min(2, w.size);
    po.optimizer_options = options_for("sgd");
    po.piece_bytes = piece;
    servers.push_back(std::make_unique<ParameterServer>(models.back()->named_parameters(), comm_for(Device::cpu()), po));
  }
  for (int step = 0; step < kSteps; ++step)
    for (size_t i = 0; i < models.size(); ++i) {
      zero_grads(*models[i]);
      ops::cross_entropy((*models[i])(xs), ys).backward();
      servers[i]->step();
    }
  const auto whole = models[0]->named_parameters(), pieces = models[1]->named_parameters();
  REQUIRE(whole.size() == pieces.size());
  for (size_t j = 0; j < whole.size(); ++j) {
    CAPTURE(whole[j].first);
    CHECK(whole[j].second.to_vector() == pieces[j].second.to_vector());
  }
}

TEST_CASE("the optimizer lives only on servers, each holding its partition's state") {
  auto model = std::make_shared<SmallCnn>(7);
  PsOptions po;
  po.servers = std::min(2, world().size);
  ParameterServer ps(model->named_parameters(), comm_for(Device::cpu()), po);
  if (world().rank >= po.servers) {
    CHECK(ps.optimizer() == nullptr);
    return;
  }
  REQUIRE(ps.optimizer() != nullptr);
  size_t mine = 0;
  for (int s : ps.assignment()) mine += s == world().rank;
  CHECK(ps.optimizer()->num_segments() == mine);
}

TEST_CASE("too many servers fails with a sentence naming the limit") {
  auto model = std::make_shared<SmallCnn>(7);
  PsOptions po;
  po.servers = world().size + 1;
  CHECK_THROWS_WITH_AS(ParameterServer(model->named_parameters(), comm_for(Device::cpu()), po),
                       doctest::Contains("must be between 1 and the number of ranks"), Error);
}
