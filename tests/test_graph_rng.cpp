// tests/test_graph_rng.cpp: the host side of random draws in captured CUDA graphs (core/graph_rng.h).
//
// What runs without a GPU: Generator::draw outside a capture is advance() exactly (so eager
// dropout keeps its numbers), the ledger hands out the relative offsets an eager step's draws would
// have had and advances the host generators per replay by the step's total (so N replays leave the
// state of N eager steps), the bound on generators fails with a message, and a draw inside a
// capture with no GraphRng recording fails instead of freezing the mask. graph_capture's
// bookkeeping is host-only, so a "capture" is opened here without any device.
// The device side (slot writes, kernels reading the slot, replay == eager) is gpu_cuda_graph.cpp's.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "core/graph_capture.h"
#include "core/graph_rng.h"
#include "core/ops/dropout/dropout.h"
#include "core/ops/graph_scalars/increment.h"
#include "core/ops/common/rng.h"
#include "core/random.h"

using namespace tandem;

TEST_CASE("Generator::draw outside a capture is advance(): same seed, offsets and host state") {
  Generator a(42), b(42);
  for (uint64_t n : {10u, 3u, 0u, 1000u}) {
    const RngDraw cpu = a.draw(n, Device::cpu());
    CHECK(cpu.seed == b.seed());
    CHECK(cpu.offset == b.advance(n));
    CHECK(cpu.slot == nullptr);
  }
  // A CUDA device with no capture open draws eagerly too (no device memory is touched for it).
  const RngDraw gpu = a.draw(7, Device::cuda(0));
  CHECK(gpu.offset == b.advance(7));
  CHECK(gpu.slot == nullptr);
  CHECK(a.offset() == b.offset());
}

TEST_CASE("the ledger gives the eager step's offsets, and each replay advances the host state as the step would") {
  // An eager step drawing 10 and 5 from g, then 3 from h, then 2 from g.
  Generator ge(5), he(9);
  ge.advance(100), he.advance(7);  // earlier steps
  Generator g = ge, h = he;
  std::vector<uint64_t> eager;
  eager.push_back(ge.advance(10));
  eager.push_back(ge.advance(5));
  eager.push_back(he.advance(3));
  eager.push_back(ge.advance(2));

  RngLedger ledger;
  const RngLedger::Take t1 = ledger.take(g, 10), t2 = ledger.take(g, 5), t3 = ledger.take(h, 3),
                        t4 = ledger.take(g, 2);
  CHECK(t1.row == 0);
  CHECK(t2.row == 0);
  CHECK(t3.row == 1);
  CHECK(t4.row == 0);
  CHECK(ledger.generators() == 2);
  CHECK(ledger.draws(g) == 17);
  CHECK(ledger.draws(h) == 3);
  CHECK(ledger.draws(ge) == 0);  // another generator, even with the same state
  CHECK(g.offset() == 100);      // recording moves no host state
  CHECK(h.offset() == 7);

  // Replay k: the kernel's counter = slot base + relative offset; equal to eager step k's.
  for (int k = 0; k < 3; ++k) {
    if (k > 0) {  // the eager reference's next step
      eager = {ge.advance(10), ge.advance(5), he.advance(3), ge.advance(2)};
    }
    const std::vector<RngLedger::State> s = ledger.next_replay();
    REQUIRE(s.size() == 2);
    CHECK(s[0].seed == 5);
    CHECK(s[1].seed == 9);
    CHECK(s[t1.row].offset + t1.offset == eager[0]);
    CHECK(s[t2.row].offset + t2.offset == eager[1]);
    CHECK(s[t3.row].offset + t3.offset == eager[2]);
    CHECK(s[t4.row].offset + t4.offset == eager[3]);
    // After the replay the host generators hold what the eager steps left (a checkpoint agrees).
    CHECK(g.offset() == ge.offset());
    CHECK(h.offset() == he.offset());
  }
  // A seed set between replays (a resume) is what the next replay's slot gets.
  g.set_state(77, 5000);
  const std::vector<RngLedger::State> s = ledger.next_replay();
  CHECK(s[0].seed == 77);
  CHECK(s[0].offset == 5000);
  CHECK(g.offset() == 5017);
}

TEST_CASE("more generators than the slot table holds fail with a message") {
  RngLedger ledger;
  std::vector<Generator> gens(RngLedger::kMaxGenerators + 1);
  for (int i = 0; i < RngLedger::kMaxGenerators; ++i) CHECK(ledger.take(gens[i], 1).row == i);
  std::string message;
  try {
    ledger.take(gens.back(), 1);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("more than 8 generators") != std::string::npos);
}

TEST_CASE("a draw inside a capture with no GraphRng recording fails instead of freezing the mask") {
  Generator g(3);
  graph_capture::begin(0);  // host bookkeeping only: what StepGraph::capture opens
  std::string message;
  try {
    (void)g.draw(16, Device::cuda(0));
  } catch (const Error& e) {
    message = e.what();
  }
  // Another device's capture, or the CPU, is not affected.
  const RngDraw other = g.draw(4, Device::cuda(1));
  const RngDraw cpu = g.draw(4, Device::cpu());
  (void)graph_capture::end();
  INFO(message);
  CHECK(message.find("no GraphRng records it") != std::string::npos);
  CHECK(other.slot == nullptr);
  CHECK(other.offset == 0);
  CHECK(cpu.offset == 4);
  CHECK(g.offset() == 8);  // the refused draw reserved nothing
}

TEST_CASE("CPU dropout draws the same counters as before: the mask of (seed, offset) and offset += numel") {
  Generator g(123);
  g.advance(40);
  const Tensor x = Tensor::ones({64});
  const Tensor y = ops::dropout(x, 0.5f, true, g);
  CHECK(g.offset() == 104);
  const std::vector<float> v = y.to_vector();
  for (int64_t i = 0; i < 64; ++i) {
    const bool keep = rng::uniform(123, 40 + static_cast<uint64_t>(i)) >= 0.5f;
    CHECK(v[i] == (keep ? 2.0f : 0.0f));
  }
}

TEST_CASE("ops::increment_ adds one in place (the CPU path of BatchNorm's captured counter)") {
  Tensor t = Tensor::zeros({}, DType::I64);
  ops::increment_(t);
  ops::increment_(t);
  CHECK(t.item() == 2);
  Tensor f = Tensor::zeros({2});
  CHECK_THROWS_AS(ops::increment_(f), Error);  // counters are i64, as num_batches_tracked
}
