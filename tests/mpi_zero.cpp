// tests/mpi_zero.cpp: ZeRO-1 and ZeRO-2 (dist/zero.h) against DDP, and checkpoints across N and stage.
//
// The experiment is tests/support/ddp_fixture.h's: rank r trains on its rows of one full batch.
//   - ZeRO-1 and ZeRO-2 with AdamW (and LAMB, SGD with momentum, clipping, no_sync) take the same
//     steps as DDP: 1e-6 relative in f32. ZeRO-1 all-reduces exactly as DDP does and updates the
//     same elements with the same elementwise math: 1e-6 per element. ZeRO-2's reduce-scatter may
//     add the ranks' gradients in another order than the all-reduce: 1e-6 norm-wise per tensor
//     (model_diff says why not per element).
//   - Every rank's parameters stay bit-identical (the all-gather copies one owner's values).
//   - The gathered optimizer state equals DDP's unsharded state (same names, 1e-6 norm-wise).
//   - Resume: save at this N with ZeRO-2, resume with ZeRO-1, DDP, and on one process (world size
//     1, the whole batch) - equal to the uninterrupted DDP run: 1e-6 norm-wise at the same N; 1e-5 on
//     one process, whose batch sums differ from the ranks' partial sums (as in tests/mpi_ddp.cpp).
// Several buckets ({256 B, 1 KiB}) so shard boundaries cut through parameters, and the default
// sizes (one bucket).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/ops/ops.h"
#include "dist/bootstrap.h"
#include "dist/zero.h"
#include "layers/checkpoint.h"
#include "layers/layers.h"
#include "optim/clip.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::ddp_fixture;

namespace {

// For the checkpoint test: layers with children, so state_dict names them ("fc1.weight");
// SmallCnn registers its tensors on itself under dotted names, which state_dict does not walk.
struct TinyMlp : Module {
  Child<Linear> fc1, fc2;
  explicit TinyMlp(uint64_t seed, int64_t hidden = 24) {
    Generator g(seed);
    fc1 = register_module("fc1", std::make_shared<Linear>(192, hidden, true, &g));
    fc2 = register_module("fc2", std::make_shared<Linear>(hidden, 10, true, &g));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(ops::relu((*fc1)(ops::flatten(x)))); }
  std::string type_name() const override { return "TinyMlp"; }
};

struct Setup {
  bool mlp = false;             // TinyMlp instead of SmallCnn
  int64_t hidden = 24;          // TinyMlp's width
  int stage = 0;                // 0: DDP
  std::string optimizer = "adamw";
  BucketingOptions buckets{256, 1024};
  double clip = 0;              // > 0: clip_grad_norm before each step
  bool accumulate = false;      // two half-batch micro-steps, the first under no_sync
};

// One run: a DDP-wrapped SmallCnn (rank r seeded 7 + 100 r: the broadcast must make them equal),
// its optimizer (sharded when stage > 0), and the state gathered at the end (rank 0).
struct Run {
  ModulePtr model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Zero> zero;
  std::unique_ptr<optim::Optimizer> opt;

  // ckpt: a checkpoint to resume (weights before DDP's broadcast, then the optimizer state).
  explicit Run(const Setup& s, const std::string& ckpt = "") : setup(s) {
    const uint64_t seed = 7 + 100 * world().rank;
    model = s.mlp ? ModulePtr(std::make_shared<TinyMlp>(seed, s.hidden)) : ModulePtr(std::make_shared<SmallCnn>(seed));
    optim::NamedTensors load;
    if (!ckpt.empty()) load = load_checkpoint(ckpt, *model).optimizer;
    DdpOptions o;
    o.reducer.bucketing = s.buckets;
    if (s.stage == 2) o.reducer.collective = Collective::ReduceScatter;
    ddp = std::make_unique<DistributedDataParallel>(model, o);
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    if (s.optimizer == "sgd") oo.momentum = 0.9;
    if (s.stage == 0) {
      opt = optim::make_optimizer(s.optimizer, model->named_parameters(), oo);
    } else {
      zero = std::make_unique<Zero>(*ddp, s.stage);
      oo.norm_reduce = zero->sum_reduce();
      opt = optim::make_optimizer(s.optimizer, zero->segments(), zero->num_params(), oo);
    }
    if (!load.empty()) opt->load_state(load);
  }

  void steps(int n) {
    const Data d = make_data(world().size * kBatch);
    const Tensor x = rank_rows(d.x, world().rank), y = rank_rows(d.y, world().rank);
    for (int i = 0; i < n; ++i) {
      if (zero) zero->zero_grad(*opt);
      else opt->zero_grad();
      if (setup.accumulate) {
        const int64_t h = kBatch / 2;
        {
          auto guard = ddp->no_sync();
          ops::scale(ops::cross_entropy((*ddp)(x.slice(0, h)), y.slice(0, h)), 0.5f).backward();
        }
        ops::scale(ops::cross_entropy((*ddp)(x.slice(h, kBatch)), y.slice(h, kBatch)), 0.5f).backward();
      } else {
        ops::cross_entropy((*ddp)(x), y).backward();
      }
      if (setup.clip > 0) optim::clip_grad_norm(*opt, setup.clip, zero ? zero->sum_reduce() : optim::SumSquaresReduce{});
      opt->step();
      if (zero) zero->gather_parameters();
    }
  }
  optim::NamedTensors state() const { return zero ? zero->gather_state(*opt) : opt->state(); }

  Setup setup;
};

// Norm-wise, per tensor: max|a - b| / max|b| (the measure of ddp_fixture's max_tensor_rel_diff).
double max_state_diff(const optim::NamedTensors& a, const optim::NamedTensors& b) { return max_named_rel_diff(a, b); }

// ZeRO-1 runs DDP's all-reduce, so elementwise (max_rel_diff) it matches to the ulp. ZeRO-2's
// reduce-scatter may sum the ranks in another order than the all-reduce (MPICH picks its algorithm
// per collective; at N = 4 they differ): the gradients then differ in the last bits, and Adam, which
// divides each element by its own gradient scale, turns a last-bit difference of a near-zero
// gradient into a visible relative change of that (near-zero) element. Measured norm-wise, per
// tensor, the difference stays at the level of f32 rounding.
double model_diff(Module& a, Module& b, bool reduce_scattered) {
  return reduce_scattered ? max_tensor_rel_diff(a, b) : max_rel_diff(a, b);
}

void check_same_as_ddp(Setup s, int steps = kSteps) {
  s.stage = 0;
  Run ddp(s);
  ddp.steps(steps);
  for (int stage : {1, 2}) {
    CAPTURE(stage);
    s.stage = stage;
    Run z(s);
    z.steps(steps);
    const double diff = model_diff(*z.model, *ddp.model, stage == 2);
    if (world().rank == 0) MESSAGE(s.optimizer, " stage ", stage, ": diff to DDP ", diff);
    CHECK(diff <= 1e-6);
    CHECK(bit_identical(*z.model));
    const optim::NamedTensors zs = z.state(), ds = ddp.state();
    if (world().rank == 0) CHECK(max_state_diff(zs, ds) <= 1e-6);
  }
}

}  // namespace

TEST_CASE("shard layout: every parameter element owned exactly once, chunks aligned") {
  ShardLayout l({{{0, 1}, {0, 10}, {10, 7}}, {{2}, {0}, {100}}}, world().size);
  std::vector<int> seen(117, 0);
  for (int r = 0; r < world().size; ++r)
    for (const ShardPiece& p : l.pieces(r)) {
      CHECK(p.slice_offset + p.length <= l.buckets()[p.bucket].chunk);
      const int64_t base = p.param == 0 ? 0 : p.param == 1 ? 10 : 17;
      for (int64_t k = 0; k < p.length; ++k) ++seen[base + p.param_offset + k];
    }
  for (int v : seen) CHECK(v == 1);
  for (const LayoutBucket& b : l.buckets()) CHECK(b.chunk % kShardAlign == 0);
}

TEST_CASE("ZeRO-1 and ZeRO-2 with AdamW equal DDP with AdamW; ranks bit-identical; state equal") {
  check_same_as_ddp({});
  Setup one_bucket;
  one_bucket.buckets = {};
  check_same_as_ddp(one_bucket);
  // The gathers that need no buffer. Width 64: fc1.weight (48 KiB, 12288 = 192 x 64 elements) is a
  // bucket alone under ZeRO-2 and needs no padding at N = 2 or 4, so its gradient is handed over as
  // the bucket and the gather lands in the parameter; under ZeRO-1 {fc1.bias, fc1.weight} (12352 =
  // 193 x 64) is a bucket without padding, so the gather lands in its spent gradient buffer.
  Setup alone;
  alone.mlp = true;
  alone.hidden = 64;
  check_same_as_ddp(alone);
  alone.accumulate = true;
  check_same_as_ddp(alone);
}

TEST_CASE("ZeRO with LAMB (norms across shards), SGD momentum, clipping and no_sync equals DDP") {
  Setup lamb;
  lamb.optimizer = "lamb";
  check_same_as_ddp(lamb);
  Setup sgd;
  sgd.optimizer = "sgd";
  check_same_as_ddp(sgd);
  Setup clip;
  clip.clip = 0.05;  // below this model's gradient norm: every step is clipped
  check_same_as_ddp(clip);
  Setup acc;
  acc.accumulate = true;
  check_same_as_ddp(acc);
}

TEST_CASE("resume across stage and world size equals the uninterrupted run") {
  constexpr int kBefore = 2, kAfter = 2;
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem_mpi_zero").string();
  const std::string path = dir + "/ckpt_np" + std::to_string(world().size) + ".safetensors";
  Setup s;
  s.mlp = true;
  s.stage = 0;
  Run whole(s);  // uninterrupted DDP
  whole.steps(kBefore + kAfter);
  s.stage = 2;
  Run first(s);
  first.steps(kBefore);
  save_on_rank0(path, *first.model, first.state());
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    s.stage = stage;
    Run resumed(s, path);
    resumed.steps(kAfter);
    CHECK(model_diff(*resumed.model, *whole.model, true) <= 1e-6);  // the first half ran ZeRO-2
    CHECK(bit_identical(*resumed.model));
  }
  // World size 1: the whole batch on one process, unsharded AdamW, from the same checkpoint.
  {
    auto one = std::make_shared<TinyMlp>(1);
    Checkpoint ck = load_checkpoint(path, *one);
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    auto opt = optim::make_optimizer("adamw", one->named_parameters(), oo);
    opt->load_state(ck.optimizer);
    const Data d = make_data(world().size * kBatch);
    for (int i = 0; i < kAfter; ++i) {
      opt->zero_grad();
      ops::cross_entropy((*one)(d.x), d.y).backward();
      opt->step();
    }
    CHECK(max_tensor_rel_diff(*one, *whole.model) <= 1e-5);
  }
  all_gather_strings("done");
  if (world().rank == 0) std::filesystem::remove(path);
}
