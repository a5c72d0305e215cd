// tests/mpi_zero_amp.cpp: mixed precision with ZeRO-1/2/3 (run under mpiexec -n 2 and -n 4), through
// the training step's own wiring (apps/trainer/step/amp.h: build_masters, make_amp_groups, amp_step,
// amp_state, take_amp_state; one parameter group here, as train_imagenet's).
//
// The model has a BatchNorm, so the AMP cast leaves f32 parameters (their own masters, f32 buckets)
// beside the 16-bit ones (f32 masters of this rank's shard only, 16-bit buckets). Under ZeRO-3 its
// three layers are units (conv and fc gathered in 16 bits, BatchNorm's unit in f32) and its 16-bit
// shards are what the masters are copied into; the weights are read inside full_parameters().
//   - AMP bf16 (and fp16) with ZeRO-1, 2 and 3 and AdamW take the same steps as AMP DDP: the f32
//     masters and the optimizer state to 1e-6 per element, the 16-bit parameters bit-identical to
//     DDP's, and every rank's parameters bit-identical. ZeRO-1 all-reduces as DDP does and updates
//     the same elements with the same elementwise math. ZeRO-2's reduce-scatter could add the
//     ranks' 16-bit gradients in another order than the all-reduce (MPICH picks the algorithm per
//     collective), and a bf16 rounding difference would then show; so the ranks here train on the
//     same rows (Setup::same_rows): N equal addends sum exactly in any order (x + x = 2x), and the
//     comparison tests the sharding, not MPICH's summation order. With rank-dependent rows ZeRO-1
//     is compared at every N and ZeRO-2/3 at N = 2 (two addends: one sum in either order).
//   - fp16 with an inf written into ONE rank's gradient shard: each rank checks only its shard,
//     so without the found-inf all-reduce only that rank would skip; with it every rank skips,
//     halves its scale, keeps its parameters, and the next clean step applies everywhere.
//   - ZeRO-2's f16 buckets are divided before the reduce-scatter, as DDP's before the all-reduce:
//     a mean that fits f16 never overflows as a sum.
//   - --clip-grad-norm under AMP + ZeRO (the norm of the unscaled f32 master gradients, summed over
//     the shards) equals AMP DDP clipping, and clipping does change the result; LAMB's per-parameter
//     norms across shards likewise.
//   - Resume: a checkpoint saved by AMP ZeRO-2, and one by AMP ZeRO-3, at this N (masters and state
//     gathered, unsharded, keyed by name) resumed with ZeRO-1, 2, 3 and DDP at this N, and on one process (world size
//     1, unsharded), equals the uninterrupted AMP DDP run to 1e-6 (masters) and bit for bit (16-bit
//     parameters). Same rows on every rank, so one process computes the ranks' averaged gradient
//     exactly and the cross-world-size check can be exact too.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <vector>

#include "apps/trainer/step/amp.h"
#include "core/ops/ops.h"
#include "dist/transport/bootstrap.h"
#include "dist/zero.h"
#include "checkpoint/checkpoint.h"
#include "layers/layers.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::ddp_fixture;

namespace {

struct Setup {
  int stage = 0;  // 0: DDP
  DType low = DType::BF16;
  std::string optimizer = "adamw";
  BucketingOptions buckets{256, 1024};  // several buckets: shard boundaries cut through parameters
  double clip = 0;                      // > 0: --clip-grad-norm
  bool same_rows = false;               // every rank trains on rank 0's rows (see the file comment)
  std::vector<int> stages{1, 2, 3};     // check_same_as_ddp: the ZeRO stages to compare with DDP
};

// ZeRO-3: conv, bn and fc are units (LayersNet's children are not in a Sequential).
Zero3Options units() {
  Zero3Options o;
  o.wrap = [](const Module&, const Module& parent) { return parent.type_name() == "LayersNet"; };
  return o;
}

// Stage 2 needs the reducer to reduce-scatter (dist/zero.h).
DdpOptions ddp_options(const Setup& s) {
  DdpOptions o;
  o.reducer.bucketing = s.buckets;
  o.reducer.collective = s.stage == 2 ? Collective::ReduceScatter : Collective::AllReduce;
  return o;
}

// One AMP run: a DDP-wrapped LayersNet with BatchNorm (rank r seeded 7 + 100 r: the broadcast must make them equal),
// [ZeRO,] the masters and the optimizer over them, built in the Step's order (apps/trainer/step/amp.h).
struct Run {
  Setup setup;
  std::shared_ptr<LayersNet> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Zero> zero;
  std::unique_ptr<trainer::AmpRun> amp;
  std::unique_ptr<trainer::ParamGroups> opt;

  explicit Run(const Setup& s, const std::string& ckpt = "") : setup(s) {
    model = std::make_shared<LayersNet>(7 + 100 * world().rank, true);
    amp = trainer::make_amp(s.low, *model, dist::comm_for(Device::cpu()));
    // A checkpoint's weights go in before DDP broadcasts rank 0's; its state after the masters exist.
    optim::NamedTensors load = ckpt.empty() ? optim::NamedTensors{} : load_checkpoint(ckpt, *model).optimizer;
    ddp = std::make_unique<DistributedDataParallel>(model, dist::comm_for(Device::cpu()), ddp_options(s));
    if (s.stage > 0) zero = std::make_unique<Zero>(*ddp, s.stage, units());
    trainer::build_masters(*amp, *model, zero.get());
    if (!ckpt.empty()) trainer::take_amp_state(amp.get(), load);
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    if (zero) oo.norm_reduce = zero->sum_reduce();
    opt = trainer::make_amp_groups(*amp, s.optimizer, oo);
    if (!load.empty()) opt->load_state(load);
  }

  Tensor rows(const Tensor& t) const { return rank_rows(t, setup.same_rows ? 0 : world().rank); }

  // Forward and the scaled backward of one step, as apps/trainer/step/step.cpp runs them (ParamGroups
  // zeroes through the Zero under ZeRO: zero.h).
  void backward(const Data& d) {
    opt->zero_grad();
    if (!zero) ddp->reducer().zero_grad();
    Tensor loss = ops::cross_entropy((*ddp)(ops::cast_raw(rows(d.x), setup.low)), rows(d.y));
    ops::scale(loss, static_cast<float>(amp->scaler.scale())).backward();
  }
  // n steps; returns how many were applied (not skipped).
  int steps(int n) {
    const Data d = make_data(world().size * kBatch);
    int applied = 0;
    for (int i = 0; i < n; ++i) {
      backward(d);
      applied += trainer::amp_step(*amp, *opt, setup.clip);
    }
    return applied;
  }
  // Unsharded optimizer state plus the "amp.*" entries (masters, scaler); complete on rank 0.
  optim::NamedTensors state() const {
    optim::NamedTensors s = opt->state();  // gathered from the shards under ZeRO (collective)
    for (auto& e : trainer::amp_state(*amp)) s.push_back(e);
    return s;
  }
  // ZeRO-3: the weights are whole only while this lives (collective); otherwise it does nothing.
  FullParameters whole() { return zero ? zero->full_parameters() : FullParameters(nullptr); }
};

// Per element |a - b| / max(|b|, 1e-3), over tensors matched by name (infinity when the names or
// sizes differ): ddp_fixture's max_rel_diff measure, for state dictionaries.
double state_diff(const optim::NamedTensors& a, const optim::NamedTensors& b) {
  std::map<std::string, Tensor> bm(b.begin(), b.end());
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (auto& [name, t] : a) {
    auto it = bm.find(name);
    if (it == bm.end() || it->second.numel() != t.numel()) return INFINITY;
    const std::vector<double> x = t.to_vector_f64(), y = it->second.to_vector_f64();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(std::abs(y[i]), 1e-3));
  }
  return worst;
}

bool has_master(const optim::NamedTensors& s) {
  for (auto& [name, t] : s)
    if (name.rfind("amp.master.", 0) == 0 && t.dtype() == DType::F32) return true;
  return false;
}

// A checkpoint every rank can read: rank 0 writes it, then a barrier; removed (after another
// barrier) when it goes out of scope.
struct SharedCheckpoint {
  std::string path;
  SharedCheckpoint(const Module& model, const optim::NamedTensors& state)
      : path((std::filesystem::temp_directory_path() /
              ("tandem_mpi_zero_amp_np" + std::to_string(world().size) + ".safetensors")).string()) {
    if (world().rank == 0) save_checkpoint(path, model, state, TrainState{});
    all_gather_strings("checkpoint written");
  }
  ~SharedCheckpoint() {
    all_gather_strings("checkpoint read");
    if (world().rank == 0) std::filesystem::remove(path);
  }
};

// Runs s as DDP and as ZeRO-1 and ZeRO-2; checks each against DDP. Returns DDP's run.
std::unique_ptr<Run> check_same_as_ddp(Setup s, int steps = kSteps) {
  s.stage = 0;
  auto ddp = std::make_unique<Run>(s);
  const int applied = ddp->steps(steps);
  const optim::NamedTensors ds = ddp->state();
  for (int stage : s.stages) {
    CAPTURE(stage);
    s.stage = stage;
    Run z(s);
    CHECK(z.steps(steps) == applied);
    const FullParameters weights = z.whole();
    CHECK(z.amp->scaler.scale() == ddp->amp->scaler.scale());
    CHECK(same_bits(*z.model, *ddp->model));  // the 16-bit parameters and BatchNorm's f32 ones
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *z.model));
    const optim::NamedTensors zs = z.state();
    if (world().rank == 0) {
      CHECK(has_master(zs));
      const double diff = state_diff(zs, ds);
      MESSAGE(s.optimizer, " ", std::string(dtype_name(s.low)), " stage ", stage, ": masters and state vs DDP ", diff);
      CHECK(diff <= 1e-6);
    }
  }
  return ddp;
}

}  // namespace

TEST_CASE("AMP bf16 and fp16 with ZeRO-1 and ZeRO-2 and AdamW equal AMP DDP; ranks bit-identical") {
  Setup s;
  s.same_rows = true;
  check_same_as_ddp(s);
  Setup one_bucket = s;
  one_bucket.buckets = {};
  check_same_as_ddp(one_bucket);
  Setup fp16 = s;
  fp16.low = DType::F16;
  check_same_as_ddp(fp16);
  // Rank-dependent rows: ZeRO-1 runs DDP's very all-reduce, so it matches exactly at any N; ZeRO-2
  // at N = 2, where a sum of two addends is the same in either order. (At N = 4 MPICH's
  // reduce-scatter pairs the ranks differently from its all-reduce - measured: bf16 gradients
  // then differ in the last bit and Adam turns that into visible changes of near-zero elements.)
  Setup distinct;
  distinct.stages = world().size == 2 ? std::vector<int>{1, 2, 3} : std::vector<int>{1};
  check_same_as_ddp(distinct);
}

TEST_CASE("fp16 + ZeRO: an inf in one rank's gradient shard skips the step on every rank and halves every scale") {
  const int last = world().size - 1;
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    Setup s;
    s.stage = stage;
    s.low = DType::F16;
    Run r(s);
    auto weights = [&] {  // fc's and conv's bytes (ZeRO-3: gathered for the look)
      const FullParameters whole = r.whole();
      return host_bytes(r.model->fc->weight()) + host_bytes(r.model->conv->weight());
    };
    r.amp->scaler = optim::LossScaler(optim::LossScalerOptions{1024.0});  // small: the clean steps stay clean
    const Data d = make_data(world().size * kBatch);
    r.backward(d);
    std::vector<Tensor> grads = r.zero->grads();
    REQUIRE(!grads.empty());
    if (world().rank == last)
      grads.back().slice(0, 1).copy_(ops::cast_raw(Tensor::full({1}, INFINITY), DType::F16));
    const std::string before = weights();
    CHECK_FALSE(trainer::amp_step(*r.amp, *r.opt));  // every rank: skipped
    CHECK(r.amp->scaler.scale() == 512.0);
    CHECK(r.amp->scaler.skipped_steps() == 1);
    CHECK(weights() == before);
    // Each rank alone would disagree: only the last one holds the inf in its shard.
    CHECK(r.amp->master->unscale_and_check(r.zero->grads(), 1.0) == (world().rank == last));
    // A clean step then applies on every rank, and the ranks stay bit-identical.
    CHECK(r.steps(1) == 1);
    CHECK(r.amp->scaler.scale() == 512.0);
    CHECK(weights() != before);
    const FullParameters whole = r.whole();
    CHECK(bit_identical(dist::comm_for(Device::cpu()), *r.model));
  }
}

TEST_CASE("ZeRO-2 averages f16 buckets without overflow (divide before the reduce-scatter)") {
  // Each rank's gradient is 40000 (f16 holds up to 65504): their sum would overflow, their mean not.
  struct Gain : Module {
    Tensor p;
    Gain() { p = register_parameter("p", ops::cast_raw(Tensor::full({64}, 0.01), DType::F16)); }
    Tensor forward(const Tensor& x) override { return ops::mul(p, x); }
    std::string type_name() const override { return "Gain"; }
  };
  auto m = std::make_shared<Gain>();
  DdpOptions o;
  o.reducer.collective = Collective::ReduceScatter;
  DistributedDataParallel ddp(m, dist::comm_for(Device::cpu()), o);
  Zero zero(ddp, 2);
  ops::sum(ops::cast((ddp)(ops::cast_raw(Tensor::full({64}, 40000.0), DType::F16)), DType::F32)).backward();
  int64_t seen = 0;
  for (const Tensor& g : zero.grads()) {
    CHECK(g.dtype() == DType::F16);
    for (float v : g.to_vector()) {
      CHECK(v == 40000.0f);
      ++seen;
    }
  }
  CHECK(seen == 64 / world().size);
}

TEST_CASE("clip-grad-norm under AMP + ZeRO equals AMP DDP clipping; LAMB's norms across shards too") {
  Setup clip;
  clip.same_rows = true;
  clip.clip = 0.05;  // below this model's gradient norm: every step is clipped
  std::unique_ptr<Run> clipped = check_same_as_ddp(clip);
  Setup plain = clip;
  plain.clip = 0;
  Run unclipped(plain);
  unclipped.steps(kSteps);
  CHECK_FALSE(same_bits(*unclipped.model, *clipped->model));  // the clipping did something
  Setup lamb;
  lamb.same_rows = true;
  lamb.optimizer = "lamb";
  check_same_as_ddp(lamb);
}

TEST_CASE("AMP resume across stage and world size equals the uninterrupted AMP DDP run") {
  constexpr int kBefore = 2, kAfter = 2;
  Setup s;
  s.same_rows = true;
  Run whole(s);  // uninterrupted AMP DDP
  whole.steps(kBefore + kAfter);
  const optim::NamedTensors whole_state = whole.state();
  for (int saved_stage : {2, 3}) {  // the first half under ZeRO-2, then under ZeRO-3
    CAPTURE(saved_stage);
    s.stage = saved_stage;
    auto first = std::make_unique<Run>(s);
    first->steps(kBefore);
    const optim::NamedTensors saved = first->state();
    if (world().rank == 0) CHECK(has_master(saved));
    std::unique_ptr<SharedCheckpoint> ck;
    {
      const FullParameters weights = first->whole();  // rank 0 writes them whole, then they go
      ck = std::make_unique<SharedCheckpoint>(*first->model, saved);
    }
    first.reset();
    const std::string& path = ck->path;
    for (int stage : {0, 1, 2, 3}) {  // the second half under DDP and every stage
      CAPTURE(stage);
      s.stage = stage;
      Run second(s, path);
      second.steps(kAfter);
      const FullParameters weights = second.whole();
      CHECK(bit_identical(dist::comm_for(Device::cpu()), *second.model));
      CHECK(same_bits(*second.model, *whole.model));
      const optim::NamedTensors end = second.state();
      if (world().rank == 0) CHECK(state_diff(end, whole_state) <= 1e-6);
    }
    // World size 1: one process, unsharded masters, the same rows, from the same checkpoint.
    {
      auto one = std::make_shared<LayersNet>(1, true);
      auto amp = trainer::make_amp(DType::BF16, *one, dist::comm_for(Device::cpu()));
      optim::NamedTensors load = load_checkpoint(path, *one).optimizer;
      trainer::build_masters(*amp, *one, nullptr);
      trainer::take_amp_state(amp.get(), load);
      optim::OptimizerOptions oo;
      oo.lr = 0.01;
      auto opt = trainer::make_amp_groups(*amp, "adamw", oo);
      opt->load_state(load);
      const Data d = make_data(world().size * kBatch);
      for (int i = 0; i < kAfter; ++i) {
        opt->zero_grad();
        one->zero_grad();
        ops::cross_entropy((*one)(ops::cast_raw(rank_rows(d.x, 0), DType::BF16)), rank_rows(d.y, 0)).backward();
        CHECK(trainer::amp_step(*amp, *opt));
      }
      CHECK(same_bits(*one, *whole.model));
      optim::NamedTensors os = opt->state();
      for (auto& e : trainer::amp_state(*amp)) os.push_back(e);
      if (world().rank == 0) CHECK(state_diff(os, whole_state) <= 1e-6);
    }
  }
}
