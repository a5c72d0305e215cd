// tests/support/zero_cases.cpp: see zero_cases.h.
#include "tests/support/zero_cases.h"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/ops/ops.h"
#include "dist/zero.h"
#include "layers/checkpoint.h"
#include "layers/layers.h"
#include "optim/clip.h"
#include "tests/support/ddp_fixture.h"

namespace tandem::testing::zero_cases {
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
  Communicator& comm;
  ModulePtr model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Zero> zero;
  std::unique_ptr<optim::Optimizer> opt;

  // ckpt: a checkpoint to resume (weights before DDP's broadcast, then the optimizer state).
  Run(Communicator& c, const Setup& s, const std::string& ckpt = "") : comm(c), setup(s) {
    const uint64_t seed = 7 + 100 * comm.rank();
    model = s.mlp ? ModulePtr(std::make_shared<TinyMlp>(seed, s.hidden)) : ModulePtr(std::make_shared<SmallCnn>(seed));
    optim::NamedTensors load;
    if (!ckpt.empty()) load = load_checkpoint(ckpt, *model).optimizer;
    DdpOptions o;
    o.reducer.bucketing = s.buckets;
    if (s.stage == 2) o.reducer.collective = Collective::ReduceScatter;
    ddp = std::make_unique<DistributedDataParallel>(model, comm, o);
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
    const Data d = make_data(comm.size() * kBatch);
    const Tensor x = rank_rows(d.x, comm.rank()), y = rank_rows(d.y, comm.rank());
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

void check_same_as_ddp(Communicator& c, Setup s, int steps = kSteps) {
  s.stage = 0;
  Run ddp(c, s);
  ddp.steps(steps);
  for (int stage : {1, 2}) {
    CAPTURE(stage);
    s.stage = stage;
    Run z(c, s);
    z.steps(steps);
    const double diff = model_diff(*z.model, *ddp.model, stage == 2);
    if (c.rank() == 0) MESSAGE(s.optimizer, " stage ", stage, ": diff to DDP ", diff);
    CHECK(diff <= 1e-6);
    CHECK(bit_identical(c, *z.model));
    const optim::NamedTensors zs = z.state(), ds = ddp.state();
    if (c.rank() == 0) CHECK(max_state_diff(zs, ds) <= 1e-6);
  }
}

}  // namespace

void check_shard_layout() {
  for (int world = 1; world <= 7; ++world) {
    CAPTURE(world);
    ShardLayout l({{{0, 1}, {0, 10}, {10, 7}}, {{2}, {0}, {100}}}, world);
    std::vector<int> seen(117, 0);
    for (int r = 0; r < world; ++r)
      for (const ShardPiece& p : l.pieces(r)) {
        CHECK(p.slice_offset + p.length <= l.buckets()[p.bucket].chunk);
        const int64_t base = p.param == 0 ? 0 : p.param == 1 ? 10 : 17;
        for (int64_t k = 0; k < p.length; ++k) ++seen[base + p.param_offset + k];
      }
    for (int v : seen) CHECK(v == 1);
    for (const LayoutBucket& b : l.buckets()) CHECK(b.chunk % kShardAlign == 0);
  }
}

void check_adamw(Communicator& c) {
  check_same_as_ddp(c, {});
  Setup one_bucket;
  one_bucket.buckets = {};
  check_same_as_ddp(c, one_bucket);
  // The gathers that need no buffer. Width 64: fc1.weight (48 KiB, 12288 = 192 x 64 elements) is a
  // bucket alone under ZeRO-2 and needs no padding at N = 2 or 4, so its gradient is handed over as
  // the bucket and the gather lands in the parameter; under ZeRO-1 {fc1.bias, fc1.weight} (12352 =
  // 193 x 64) is a bucket without padding, so the gather lands in its spent gradient buffer.
  Setup alone;
  alone.mlp = true;
  alone.hidden = 64;
  check_same_as_ddp(c, alone);
  alone.accumulate = true;
  check_same_as_ddp(c, alone);
}

void check_lamb_sgd_clip_accumulate(Communicator& c) {
  Setup lamb;
  lamb.optimizer = "lamb";
  check_same_as_ddp(c, lamb);
  Setup sgd;
  sgd.optimizer = "sgd";
  check_same_as_ddp(c, sgd);
  Setup clip;
  clip.clip = 0.05;  // below this model's gradient norm: every step is clipped
  check_same_as_ddp(c, clip);
  Setup acc;
  acc.accumulate = true;
  check_same_as_ddp(c, acc);
}

void check_resume(Communicator& c, const std::string& dir) {
  constexpr int kBefore = 2, kAfter = 2;
  const std::string path = dir + "/ckpt_np" + std::to_string(c.size()) + ".safetensors";
  Setup s;
  s.mlp = true;
  s.stage = 0;
  Run whole(c, s);  // uninterrupted DDP
  whole.steps(kBefore + kAfter);
  s.stage = 2;
  Run first(c, s);
  first.steps(kBefore);
  save_on_rank0(c, path, *first.model, first.state());
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    s.stage = stage;
    Run resumed(c, s, path);
    resumed.steps(kAfter);
    CHECK(model_diff(*resumed.model, *whole.model, true) <= 1e-6);  // the first half ran ZeRO-2
    CHECK(bit_identical(c, *resumed.model));
  }
  // World size 1: the whole batch on one process, unsharded AdamW, from the same checkpoint.
  {
    auto one = std::make_shared<TinyMlp>(1);
    Checkpoint ck = load_checkpoint(path, *one);
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    auto opt = optim::make_optimizer("adamw", one->named_parameters(), oo);
    opt->load_state(ck.optimizer);
    const Data d = make_data(c.size() * kBatch);
    for (int i = 0; i < kAfter; ++i) {
      opt->zero_grad();
      ops::cross_entropy((*one)(d.x), d.y).backward();
      opt->step();
    }
    CHECK(max_tensor_rel_diff(*one, *whole.model) <= 1e-5);
  }
  all_gather_strings(c, "done");
  if (c.rank() == 0) std::filesystem::remove(path);
}

}  // namespace tandem::testing::zero_cases
