// tests/mpi_ddp.cpp: DistributedDataParallel on a small CNN, against one process on the full batch.
//
// N ranks with batch b must take the same SGD steps as one process with batch N*b (the experiment,
// its model and the equivalence grid live in tests/support/ddp_fixture.h, shared with
// tests/mpi_gpu_ddp.cpp). Also:
// no_sync accumulation, 16-bit gradient compression, and broadcast_buffers on a BatchNorm model.
// Tolerance 1e-5 relative in f32: the two sides sum the same products in a different order
// (per-rank partial sums, then the all-reduce), a few ulps per step over 3 steps.
#include <doctest/doctest.h>

#include "core/backend.h"

#include <cmath>

#include "core/ops/ops.h"
#include "core/random.h"
#include "layers/layers.h"
#include "dist/transport/bootstrap.h"
#include "dist/ddp.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::ddp_fixture;

namespace {
constexpr int64_t kB = kBatch;
Communicator& mpi() { return comm_for(Device::cpu()); }
// Every test here runs the im2col convolutions: oneDNN (BackendConfig::cpu_onednn, the default)
// picks its kernel by batch size, so batch b and batch 2b sum a conv's gradient in different orders
// - 1.1e-5 apart on 2 ranks, above the 1e-5 bounds below, which are about the reducer's arithmetic,
// not the conv library's. (tests/test_ddp.cpp's thread ranks and the 4-rank runs stayed within them.)
const BackendScope kIm2col(&BackendConfig::cpu_onednn, false);
}  // namespace

TEST_CASE("N ranks x batch b == 1 process x batch N*b (several buckets or the default one); ranks bit-identical") {
  check_equivalence_grid(mpi(), Device::cpu(), 1e-5);
}

// Deep enough that backward takes milliseconds: the first buckets' all-reduces can start while
// the earlier layers' gradients are still being computed.
struct DeepCnn : Module {
  std::vector<Tensor> w;
  DeepCnn() {
    Generator g(3);
    for (int i = 0; i < 8; ++i) {
      Tensor t = randn({32, 3, 3, i == 0 ? 3 : 32}, g);
      ops::scale_(t, 0.05f);
      w.push_back(register_parameter("conv" + std::to_string(i) + ".weight", t));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (Tensor& wi : w) h = ops::relu(ops::conv2d(h, wi, Tensor(), {1, 1, 1, 1}));
    return h;
  }
  std::string type_name() const override { return "DeepCnn"; }
};

TEST_CASE("overlap is real: with many buckets, some all-reduce starts before backward ends") {
  DdpOptions o;
  o.reducer.bucketing = {64, 64};  // one bucket per parameter
  DistributedDataParallel ddp(std::make_shared<DeepCnn>(), mpi(), o);
  Generator g(5);
  Tensor x = randn({2, 24, 24, 3}, g);
  for (int step = 0; step < kSteps; ++step) {
    zero_grads(ddp.module());
    ops::mean(ddp(x)).backward();
  }
  bool early = false;
  for (const StepTiming& s : ddp.timeline().steps()) {
    CHECK(s.buckets.size() == 8);
    for (const BucketTiming& b : s.buckets) early = early || b.launch_us < s.backward_end_us;
  }
  CHECK(early);
  TimelineSummary sum = ddp.timeline().summary();
  CHECK(sum.steps == kSteps - 1);
  CHECK(sum.overlap > 0.0);
  MESSAGE("rank ", world().rank, ": ", sum.str());
}

TEST_CASE("model check passes for identical models and names the parameter that differs") {
  SmallCnn same(1);
  check_same_model(mpi(), same);  // no throw
}

TEST_CASE("no_sync: two micro-batches, the first under no_sync, == one step on the concatenated batch") {
  // Each micro-batch's loss is scaled by 1/2 (the usual loss / accumulation_steps), so the
  // accumulated gradient is the mean over both; averaged over ranks it is the full batch's.
  const World& w = world();
  Data d = make_data(2 * w.size * kB);  // rank r's two micro-batches: rows [2rb, 2rb + b) and [2rb + b, 2rb + 2b)
  auto rows = [&](const Tensor& t, int micro) { return t.slice((2 * w.rank + micro) * kB, (2 * w.rank + micro + 1) * kB); };
  auto ref = std::make_shared<SmallCnn>(7);
  auto model = std::make_shared<SmallCnn>(7);
  DdpOptions o;
  o.reducer.bucketing = {256, 1024};
  DistributedDataParallel ddp(model, mpi(), o);
  for (int step = 0; step < kSteps; ++step) {
    zero_grads(*model);
    {
      auto guard = ddp.no_sync();
      ops::scale(ops::cross_entropy(ddp(rows(d.x, 0)), rows(d.y, 0)), 0.5f).backward();
    }
    if (w.size > 1) CHECK_FALSE(bit_identical(mpi(), *model, true));  // nothing was communicated yet
    ops::scale(ops::cross_entropy(ddp(rows(d.x, 1)), rows(d.y, 1)), 0.5f).backward();
    sgd_step(*model);
    zero_grads(*ref);
    ops::cross_entropy((*ref)(d.x), d.y).backward();
    sgd_step(*ref);
  }
  CHECK(max_rel_diff(*model, *ref) <= 1e-5);
  CHECK(bit_identical(mpi(), *model));
  CHECK(ddp.timeline().steps().size() == kSteps);  // only the synchronised backwards were recorded
}

TEST_CASE("bf16/f16 gradient compression: close to uncompressed, ranks still bit-identical") {
  // Tolerance, relative to the size of the whole 3-step update (max |p_exact - p_init|): on the
  // wire each averaged gradient picks up at most N roundings of relative size u (the cast of g/N,
  // then up to N - 1 pairwise sums rounded back; u = 2^-8 bf16, 2^-11 f16) of values no larger
  // than max_r |g_r|, so each step's update is off by <= N u max|g_r| lr. A factor 4 covers local
  // gradients up to 2x the averaged one and the small propagation of errors through 3 steps.
  ReducerOptions ro;
  ro.bucketing = {256, 1024};
  auto exact = check_equivalence(mpi(), ro, Device::cpu(), 1e-5).model;
  SmallCnn init(7);
  for (Compression c : {Compression::BF16, Compression::F16}) {
    CAPTURE(static_cast<int>(c));
    ro.compression = c;
    auto model = train_ddp_and_reference(mpi(), ro).model;
    CHECK(bit_identical(mpi(), *model));  // every rank applies the same all-reduced (rounded) gradient
    double diff = 0, update = 0;
    auto pc = model->parameters(), pe = exact->parameters(), p0 = init.parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      std::vector<float> vc = pc[i].to_vector(), ve = pe[i].to_vector(), v0 = p0[i].to_vector();
      for (size_t j = 0; j < vc.size(); ++j) {
        diff = std::max(diff, std::abs(double(vc[j]) - ve[j]));
        update = std::max(update, std::abs(double(ve[j]) - v0[j]));
      }
    }
    const double u = c == Compression::BF16 ? 1.0 / 256 : 1.0 / 2048;
    if (world().rank == 0) MESSAGE("compression ", std::string(c == Compression::BF16 ? "bf16" : "f16"), ": max diff / max update = ", diff / update,
            " (bound ", 4 * world().size * u, ")");
    CHECK(diff > 0);  // the wire really was 16-bit
    CHECK(diff / update <= 4 * world().size * u);
  }
}

namespace {
// Wraps a model and records every buffer's bytes at the start of each forward, i.e. right after
// DDP's broadcast: what every rank's BatchNorm normalises and updates from.
struct BufferProbe : Module {
  ModulePtr net;
  std::string seen;
  explicit BufferProbe(ModulePtr m) : net(register_module("net", std::move(m))) {}
  Tensor forward(const Tensor& x) override {
    for (auto& [name, t] : named_buffers()) seen += host_bytes(t);
    return (*net)(x);
  }
  std::string type_name() const override { return "BufferProbe"; }
};
}  // namespace

TEST_CASE("broadcast_buffers: every training forward starts from rank 0's BatchNorm statistics") {
  // PyTorch's semantics: rank 0's buffers are broadcast before each training forward, and each
  // rank then folds its own batch into them, so after the last step the ranks differ again by
  // one update; the guarantee is bit-identical buffers at the start of every forward. The
  // control run (broadcast_buffers = false) must see them drift apart: each rank's data differs.
  const World& w = world();
  Data d = make_data(w.size * kB);
  Tensor xs = rank_rows(d.x, w.rank), ys = rank_rows(d.y, w.rank);
  for (bool broadcast : {true, false}) {
    CAPTURE(broadcast);
    auto probe = std::make_shared<BufferProbe>(std::make_shared<LayersNet>(9, /*batchnorm=*/true));
    DdpOptions o;
    o.broadcast_buffers = broadcast;
    DistributedDataParallel ddp(probe, mpi(), o);
    for (int step = 0; step < kSteps; ++step) {
      zero_grads(*probe);
      ops::cross_entropy(ddp(xs), ys).backward();
      sgd_step(*probe);
      // Coalesced: the f32 statistics in one broadcast, the i64 counter in another.
      CHECK(ddp.buffer_collectives() == (broadcast && w.size > 1 ? 2 : 0));
    }
    std::vector<std::string> all = all_gather_strings(probe->seen);
    bool same = true;
    for (const std::string& s : all) same = same && s == all[0];
    if (broadcast || w.size == 1) CHECK(same);
    else CHECK_FALSE(same);
  }
}

TEST_CASE("broadcast_coalesced: one collective per dtype, every tensor becomes root's") {
  // Interleaved dtypes and shapes (a scalar too), values that depend on the rank: after the call
  // every rank holds rank 0's values, and only two broadcasts were issued (f32 and i64).
  const World& w = world();
  const float r = static_cast<float>(w.rank);
  std::vector<Tensor> ts = {Tensor::from_vector({r, r + 1, r + 2}, {3}),
                            Tensor::from_vector_i64({w.rank * 10 + 1, w.rank * 10 + 2}, {2}),
                            Tensor::from_vector({r * 4, r * 4 + 1, r * 4 + 2, r * 4 + 3}, {2, 2}),
                            Tensor::from_vector_i64({w.rank + 7}, {})};
  CHECK(broadcast_coalesced(mpi(), ts, 0, "test broadcast") == 2);
  CHECK(ts[0].to_vector() == std::vector<float>{0, 1, 2});
  CHECK(ts[1].to_vector_i64() == std::vector<int64_t>{1, 2});
  CHECK(ts[2].to_vector() == std::vector<float>{0, 1, 2, 3});
  CHECK(ts[2].shape() == Shape{2, 2});
  CHECK(ts[3].to_vector_i64() == std::vector<int64_t>{7});
  // A single tensor of a dtype is broadcast in place: still one collective.
  std::vector<Tensor> one = {Tensor::from_vector({r}, {1})};
  CHECK(broadcast_coalesced(mpi(), one, 0, "test broadcast") == 1);
  CHECK(one[0].to_vector() == std::vector<float>{0});
}
