// tests/support/zero_cases.cpp: see zero_cases.h.
#include "tests/support/zero_cases.h"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/ops/ops.h"
#include "dist/zero.h"
#include "checkpoint/checkpoint.h"
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

// SmallCnn's layers as a Sequential (conv, relu, pool, conv, relu, flatten, linear): under ZeRO-3's
// default policy each conv and the linear is a unit, the root holds nothing. `bypass`: the root runs
// the Sequential's layers itself, so no unit's hooks ever fire (the trace must pin them all).
struct SeqCnn : Module {
  Child<Sequential> body;
  bool bypass;
  explicit SeqCnn(uint64_t seed, bool bypass_hooks = false) : bypass(bypass_hooks) {
    Generator g(seed);
    Conv2dOptions same;
    same.padding = 1;
    body = register_module("body", std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Conv2d>(3, 4, 3, same, &g), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Conv2d>(4, 6, 3, same, &g), std::make_shared<ReLU>(), std::make_shared<Flatten>(),
        std::make_shared<Linear>(96, 10, true, &g)}));
  }
  Tensor forward(const Tensor& x) override {
    if (!bypass) return (*body)(x);
    Tensor h = x;
    for (size_t i = 0; i < body->size(); ++i) h = (*body)[i]->forward(h);  // forward(), not operator(): unhooked
    return h;
  }
  std::string type_name() const override { return "SeqCnn"; }
};

struct Setup {
  bool mlp = false;             // TinyMlp instead of SmallCnn
  bool seq = false;             // SeqCnn instead of SmallCnn
  bool bypass = false;          // SeqCnn that runs its layers without their hooks
  int64_t hidden = 24;          // TinyMlp's width
  int stage = 0;                // 0: DDP
  std::string optimizer = "adamw";
  BucketingOptions buckets{256, 1024};
  double clip = 0;              // > 0: clip_grad_norm before each step
  bool accumulate = false;      // two half-batch micro-steps, the first under no_sync
  Zero3Options zero3;           // stage 3: the units and the prefetch depth
};

ModulePtr make_model(const Setup& s, uint64_t seed) {
  if (s.mlp) return std::make_shared<TinyMlp>(seed, s.hidden);
  if (s.seq) return std::make_shared<SeqCnn>(seed, s.bypass);
  return std::make_shared<SmallCnn>(seed);
}

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
    model = make_model(s, seed);
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
      zero = std::make_unique<Zero>(*ddp, s.stage, s.zero3);
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
  // ZeRO-3: the weights are whole only while this lives (collective); otherwise it does nothing.
  FullParameters whole() { return zero ? zero->full_parameters() : FullParameters(nullptr); }

  Setup setup;
};

bool every_linear(const Module& m, const Module&) { return m.type_name() == "Linear"; }  // a ZeRO-3 policy

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

void check_same_as_ddp(Communicator& c, Setup s, std::vector<int> stages = {1, 2}, int steps = kSteps) {
  s.stage = 0;
  Run ddp(c, s);
  ddp.steps(steps);
  for (int stage : stages) {
    CAPTURE(stage);
    s.stage = stage;
    Run z(c, s);
    z.steps(steps);
    const FullParameters whole = z.whole();
    const double diff = model_diff(*z.model, *ddp.model, stage >= 2);
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
  Setup s;
  s.mlp = true;
  s.zero3.wrap = every_linear;  // stage 3: fc1 and fc2 are units (the default would make TinyMlp one)
  s.stage = 0;
  Run whole(c, s);  // uninterrupted DDP
  whole.steps(kBefore + kAfter);
  for (int saved : {2, 3}) {
    CAPTURE(saved);
    const std::string path =
        dir + "/ckpt_np" + std::to_string(c.size()) + "_zero" + std::to_string(saved) + ".safetensors";
    {
      s.stage = saved;
      Run first(c, s);
      first.steps(kBefore);
      const FullParameters weights = first.whole();
      save_on_rank0(c, path, *first.model, first.state());
    }
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(stage);
      s.stage = stage;
      Run resumed(c, s, path);
      resumed.steps(kAfter);
      const FullParameters weights = resumed.whole();
      CHECK(model_diff(*resumed.model, *whole.model, true) <= 1e-6);  // the first half reduce-scattered
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
}

void check_zero3(Communicator& c) {
  Setup seq;  // the default policy: conv, conv and linear are units; prefetch 1
  seq.seq = true;
  check_same_as_ddp(c, seq, {3});
  Setup no_prefetch = seq;
  no_prefetch.zero3.prefetch = 0;
  check_same_as_ddp(c, no_prefetch, {3});
  Setup deep = seq;  // every later unit already in flight
  deep.zero3.prefetch = 3;
  check_same_as_ddp(c, deep, {3});
  Setup one_bucket = seq;  // buckets as the user set them are regrouped by unit all the same
  one_bucket.buckets = {};
  check_same_as_ddp(c, one_bucket, {3});
  check_same_as_ddp(c, Setup{}, {3});  // SmallCnn: its tensors are the root's own, one unit
  Setup mlp;
  mlp.mlp = true;
  mlp.hidden = 64;  // fc1.weight needs no padding at N = 2, 4: a unit whose gather has no padding
  mlp.zero3.wrap = every_linear;
  check_same_as_ddp(c, mlp, {3});
  Setup sgd = seq;
  sgd.optimizer = "sgd";
  check_same_as_ddp(c, sgd, {3});
  Setup lamb = seq;  // per-parameter norms over the shards
  lamb.optimizer = "lamb";
  check_same_as_ddp(c, lamb, {3});
  Setup clip = seq;
  clip.clip = 0.05;  // below this model's gradient norm: every step is clipped
  check_same_as_ddp(c, clip, {3});
  Setup acc = seq;
  acc.accumulate = true;
  check_same_as_ddp(c, acc, {3});
  Setup bypass = seq;  // no unit's hook ever fires: the first step's trace pins every unit
  bypass.bypass = true;
  check_same_as_ddp(c, bypass, {3});
}

void check_zero3_schedule(Communicator& c) {
  Setup s;
  s.seq = true;
  s.stage = 3;
  Run z(c, s);
  REQUIRE(z.zero->schedule());
  const Zero3Schedule& schedule = *z.zero->schedule();
  CHECK(schedule.units().size() == 4);  // the root (no parameters of its own) and conv, conv, linear
  // Whether a unit's parameters hold bytes, seen from hooks registered after the schedule's: a
  // pre-hook runs after its gather, a post-hook after its free.
  auto resident = [](Module& m) {
    bool all = true;
    for (const Tensor& p : m.parameters()) all = all && p.storage()->resident();
    return all;
  };
  std::vector<int> during, after;  // per unit: 1 resident, 0 freed; the last step's
  std::vector<autograd::HookHandle> hooks;
  for (size_t i : {0, 3, 6}) {
    Module& unit = *(*std::static_pointer_cast<SeqCnn>(z.model)->body)[i];
    hooks.push_back(unit.register_forward_pre_hook([&, i](Module& m) { during.push_back(resident(m)); }));
    hooks.push_back(unit.register_forward_hook([&, i](Module& m, const Tensor&) { after.push_back(resident(m)); }));
  }
  z.steps(1);  // the traced step: everything gathered until the end of backward
  CHECK(during == std::vector<int>{1, 1, 1});
  CHECK(after == std::vector<int>{1, 1, 1});
  during.clear(), after.clear();
  z.steps(2);
  CHECK(during == std::vector<int>(6, 1));
  CHECK(after == std::vector<int>(6, 0));  // freed right after their forward
  CHECK(schedule.order() == std::vector<size_t>{0, 1, 2, 3});
  for (const Tensor& p : z.model->parameters()) CHECK_FALSE(p.storage()->resident());  // between steps: none
  {
    const FullParameters weights = z.whole();
    for (const Tensor& p : z.model->parameters()) CHECK(p.storage()->resident());
    autograd::NoGradGuard no_grad;  // an evaluation forward inside the guard frees nothing
    (*z.ddp)(make_data(kBatch).x);
    for (const Tensor& p : z.model->parameters()) CHECK(p.storage()->resident());
  }
  for (const Tensor& p : z.model->parameters()) CHECK_FALSE(p.storage()->resident());
  // Model state between steps: this rank's shards (parameters and gradients) and AdamW's moments.
  int64_t shard = 0;
  for (size_t b = 0; b < z.zero->layout().buckets().size(); ++b) shard += schedule.shard(b).numel();
  CHECK(shard == z.zero->layout().shard_numel());
  CHECK(shard * c.size() < z.model->num_parameters() + 3 * kShardAlign * c.size() + 1);  // 1/N, padding apart
}

}  // namespace tandem::testing::zero_cases
