// tests/gpu_cuda_graph.cpp: core/cuda/graph.h's StepGraph on a real training step, and its errors.
//
// The experiment: small_cnn (conv, BatchNorm, ReLU, pooling, linear) trains K steps with SGD
// (momentum, weight decay) and an LR that changes every step, once eagerly and once with steps
// 1..3 eager and step 4 captured and then replayed for steps 4..K. Same init, same batches.
// Expected: bitwise-equal parameters, momentum-driven results and BN running statistics. Both runs
// use --deterministic's cuDNN engines and the same shapes, so they pick the same kernels, and a
// replay runs exactly the captured kernels on exactly the same addresses: any difference is a bug
// (a frozen LR shows as a drift from step 5 on, a stale input as a wrong loss at once).
// BN's num_batches_tracked must count every step, replays included (incremented on the device
// inside the graph, layers/norm.cpp).
// The dropout experiment: an MLP with BatchNorm, two Dropout layers and a bias_dropout_add (the
// fused op draws a mask too) trains the same way; every replay must draw the masks the eager step
// would have (core/graph_rng.h), so parameters and losses again agree bitwise, and the dropout
// generator's host offset after the replays equals the eager one. A frozen mask shows as a drift
// from step 5 on; a slot read at the wrong base as a wrong loss at step 4.
// The error cases: a host sync inside the step and a tensor escaping it fail the capture with a
// message naming the cause, and the stream stays usable for eager work afterwards.
// Exits 77 (Skipped) only when the machine has no GPU (tests/support/main.cpp).
// StepGraph exists only in CUDA builds: a CPU-only build compiles no case here (and, having no
// GPU, exits 77 before doctest runs).
#ifdef TANDEM_WITH_CUDA
#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/graph.h"
#include "core/graph_rng.h"
#include "core/ops/conv/conv.h"
#include "core/ops/dropout/dropout.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/fused_bias/fused_bias.h"
#include "core/ops/loss/loss.h"
#include "core/ops/matmul/matmul.h"
#include "core/random.h"
#include "layers/layers.h"
#include "layers/models/models.h"
#include "optim/optimizer.h"

using namespace tandem;

namespace {
constexpr int kSteps = 8;
constexpr int kWarmup = 3;
constexpr int64_t kBatch = 4, kSize = 16, kClasses = 10;

struct Result {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // parameters and BN statistics
  std::vector<float> losses;                                       // per step
  std::vector<int64_t> batches_tracked;                            // each BN's num_batches_tracked
  uint64_t dropout_offset = 0;                                     // the dropout generator's, after
  uint64_t captured_draws = 0;      // counters the captured step draws from the dropout generator
  size_t captured_generators = 0;   // generators the captured step draws from
};

// The experiment on `model`: SGD (momentum, weight decay) with an LR that changes every step, on
// batches x [in] and labels fixed per step; kSteps eager, or kWarmup eager and then one captured
// (through a GraphRng, which records nothing when the step draws nothing) and replayed. `drop`:
// the dropout generator, whose host offset and per-step draws are checked (null: none).
Result run(Module& model, const Shape& in, bool graphed, const std::function<Tensor(const Tensor&)>& logits_of,
           Generator* drop = nullptr) {
  BackendConfig deterministic = backend();
  deterministic.deterministic = true;
  BackendScope scope(deterministic);  // the same cuDNN engines in both runs
  const Device gpu = Device::cuda(0);
  model.to(gpu);
  model.train();
  optim::OptimizerOptions oo;
  oo.lr = 0.1, oo.momentum = 0.9, oo.weight_decay = 1e-4;
  auto opt = optim::make_optimizer("sgd", model.named_parameters(), oo);
  // Static inputs and output: the graph reads and writes these addresses at every replay.
  Tensor x = Tensor::empty(in, DType::F32, gpu);
  Tensor y = Tensor::empty({kBatch}, DType::I64, gpu);
  Tensor loss_out;  // made by the first (eager) step, written in place after
  auto body = [&] {
    Tensor loss = ops::cross_entropy(logits_of(x), y, 0.0f);
    opt->zero_grad();
    loss.backward();
    opt->step();
    if (!loss_out.defined()) loss_out = loss.detach().clone();
    else loss_out.copy_(loss.detach());
  };
  cuda::StepGraph graph(0);
  GraphRng rng(0);
  Generator data(11);
  Result r;
  for (int k = 0; k < kSteps; ++k) {
    x.copy_(randn(in, data));
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < kBatch; ++i) labels.push_back((k * 3 + i * 7) % kClasses);
    y.copy_(Tensor::from_vector_i64(labels, {kBatch}));
    opt->set_lr(0.1 * (1.0 - 0.07 * k));  // changes every step: a frozen LR would show
    if (!graphed || k < kWarmup) {
      body();
    } else {
      if (!graph.captured()) {
        const uint64_t before = drop ? drop->offset() : 0;
        rng.record([&] { graph.capture(body); });
        if (drop) CHECK(drop->offset() == before);  // the capture ran nothing, so it drew nothing on the host
        r.captured_draws = drop ? rng.ledger().draws(*drop) : 0;
        r.captured_generators = rng.ledger().generators();
      }
      rng.before_replay();  // the slots for this replay; the host offsets step on
      graph.replay();
    }
    r.losses.push_back(static_cast<float>(loss_out.item()));  // a host sync, outside the step
  }
  if (graphed) CHECK(graph.nodes() > 10);
  for (auto& [name, p] : model.named_parameters()) r.tensors.emplace_back(name, p.to_vector());
  for (auto& [name, b] : model.named_buffers()) {
    if (name.find("num_batches_tracked") == std::string::npos) r.tensors.emplace_back(name, b.to_vector());
    else r.batches_tracked.push_back(b.to_vector_i64().at(0));
  }
  if (drop) r.dropout_offset = drop->offset();
  return r;
}

Result train(bool graphed) {
  ModulePtr model = models::create_model("small_cnn", kClasses, 7);
  return run(*model, {kBatch, kSize, kSize, 3}, graphed, [&](const Tensor& x) { return (*model)(x); });
}

// Bitwise, with the first mismatching element printed so a person can judge it.
void check_same(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    FAIL_CHECK(what, "[", i, "]: eager ", a[i], " vs graph ", b[i]);
    return;
  }
}

// Losses, parameters and BN statistics, all bitwise.
void check_same_run(const Result& eager, const Result& graphed) {
  check_same("loss per step", eager.losses, graphed.losses);
  REQUIRE(eager.tensors.size() == graphed.tensors.size());
  for (size_t i = 0; i < eager.tensors.size(); ++i)
    check_same(eager.tensors[i].first, eager.tensors[i].second, graphed.tensors[i].second);
}

// The dropout experiment (see the top): x [kBatch, 2, 2, kIn] (NHWC, BatchNorm's usual layout) ->
// Linear, BatchNorm, ReLU, Dropout(0.3) -> h; z = h + dropout(h W^T + b) by ops::bias_dropout_add
// (p 0.25); Flatten, Dropout(0.5), Linear -> logits. Each of the three draws kDrawn counters.
constexpr int64_t kIn = 24, kHidden = 32, kDrawn = kBatch * 2 * 2 * kHidden;
Result train_dropout(bool graphed) {
  Generator init(3), drop(5);  // the masks come from `drop` only
  auto first = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(kIn, kHidden, true, &init), std::make_shared<BatchNorm2d>(kHidden),
      std::make_shared<ReLU>(), std::make_shared<Dropout>(0.3, &drop)});
  auto mid = std::make_shared<Linear>(kHidden, kHidden, true, &init);
  auto last = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Dropout>(0.5, &drop),
      std::make_shared<Linear>(4 * kHidden, kClasses, true, &init)});
  Sequential model(std::vector<ModulePtr>{first, mid, last});  // holds the parameters; not called
  return run(model, {kBatch, 2, 2, kIn}, graphed, [&](const Tensor& x) {
    Tensor h = (*first)(x);
    return (*last)(ops::bias_dropout_add(ops::linear(h, mid->weight()), mid->bias(), h, 0.25f, true, drop));
  }, &drop);
}

}  // namespace

TEST_CASE("a captured and replayed SGD step of small_cnn equals the eager steps bitwise") {
  const Result eager = train(false), graphed = train(true);
  check_same_run(eager, graphed);
  CHECK(eager.losses.back() != eager.losses.front());  // the steps did train
  CHECK(graphed.captured_generators == 0);  // small_cnn draws nothing: no slot writes
  REQUIRE(!graphed.batches_tracked.empty());
  CHECK(eager.batches_tracked == graphed.batches_tracked);
  for (int64_t n : graphed.batches_tracked) CHECK(n == kSteps);  // replays count too
}

TEST_CASE("replayed steps with dropout draw the eager steps' masks: bitwise-equal training and generator state") {
  const Result eager = train_dropout(false), graphed = train_dropout(true);
  check_same_run(eager, graphed);
  CHECK(eager.losses.back() != eager.losses.front());
  CHECK(graphed.captured_generators == 1);
  CHECK(graphed.captured_draws == 3 * kDrawn);  // Dropout(0.3), bias_dropout_add, Dropout(0.5)
  // Every step drew 3 * kDrawn counters, replays included, on the host as eagerly.
  CHECK(eager.dropout_offset == static_cast<uint64_t>(kSteps) * 3 * kDrawn);
  CHECK(graphed.dropout_offset == eager.dropout_offset);
  REQUIRE(graphed.batches_tracked.size() == 1);
  CHECK(graphed.batches_tracked[0] == kSteps);
  CHECK(eager.batches_tracked == graphed.batches_tracked);
}

TEST_CASE("a dropout draw captured without a GraphRng fails the capture instead of freezing its mask") {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::ones({64}, DType::F32, gpu);
  Tensor out = Tensor::zeros({64}, DType::F32, gpu);
  Generator g(1);
  cuda::StepGraph graph(0);
  std::string message;
  try {
    graph.capture([&] { out.copy_(ops::dropout(a, 0.5f, true, g)); });
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("no GraphRng records it") != std::string::npos);
  CHECK_FALSE(graph.captured());
  CHECK(g.offset() == 0);
}

TEST_CASE("a host sync inside the step fails the capture with the reason, and eager work goes on") {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::ones({16}, DType::F32, gpu);
  cuda::StepGraph graph(0);
  std::string message;
  try {
    // One element, so that item() is the host sync under test: on a 16-element tensor it refused
    // before reaching the device ("item() needs a one-element tensor"; issue 18's H100 run).
    graph.capture([&] { (void)ops::add(a, a).slice(0, 1).item(); });
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("capturing the training step as a CUDA graph failed") != std::string::npos);
  CHECK(message.find("one-element") == std::string::npos);  // the step's own mistake would hide the sync
  // CUDA reports the D2H copy or the stream sync as unsupported, or (if an earlier call already
  // broke the capture) as invalidated: either way the message explains it.
  CHECK((message.find("host synchronisation") != std::string::npos ||
         message.find("invalidated the capture") != std::string::npos));
  CHECK_FALSE(graph.captured());
  CHECK(ops::add(a, a).to_vector()[3] == 2.0f);  // the stream is out of capture mode
}

TEST_CASE("a tensor allocated inside the step and kept after it fails the capture") {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::ones({1024}, DType::F32, gpu);
  Tensor kept;
  cuda::StepGraph graph(0);
  std::string message;
  try {
    graph.capture([&] { kept = ops::add(a, a); });
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("still alive after it") != std::string::npos);
  CHECK_FALSE(graph.captured());
  kept = Tensor();  // its graph allocation is freed outside any graph: legal, and must not fault
  CHECK(ops::add(a, a).to_vector()[0] == 2.0f);
}

TEST_CASE("a block from before the capture, read and dropped inside it, lives as long as the graph") {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::ones({256}, DType::F32, gpu);
  Tensor old = Tensor::ones({256}, DType::F32, gpu);
  Tensor out = Tensor::zeros({256}, DType::F32, gpu);
  cuda::StepGraph graph(0);
  graph.capture([&] {
    out.copy_(ops::add(a, old));
    old = Tensor();  // a pre-capture block: a graph free node may not free it; the StepGraph keeps it
  });
  // Reuse the pool: had `old` been freed, these would likely take its bytes, and replays read 0 + 1.
  std::vector<Tensor> churn;
  for (int i = 0; i < 8; ++i) churn.push_back(Tensor::zeros({256}, DType::F32, gpu));
  graph.replay();
  graph.replay();
  CHECK(out.to_vector()[0] == 2.0f);
}

#endif  // TANDEM_WITH_CUDA
