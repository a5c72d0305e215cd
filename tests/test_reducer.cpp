// tests/test_reducer.cpp: the reducer's multi-rank cases in one process, 2 and 4 ranks as threads
// (dist/transport/comm_thread.h). The bodies are tests/support/reducer_cases.h's, which
// tests/mpi_reducer.cpp runs over MPI: the same assertions hold for either backend.
#include <doctest/doctest.h>

#include "dist/transport/comm_thread.h"
#include "tests/support/reducer_cases.h"
#include "tests/support/thread_ranks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing::reducer_cases;
using tandem::testing::on_ranks;


TEST_CASE("gradients are averaged over ranks: bucketed/unbucketed, overlap on/off") {
  on_ranks({2, 4}, check_averaged);
}
TEST_CASE("Reducer::zero_grad: one memset per bucket, then backward copies in") { on_ranks({2, 4}, check_zero_grad); }
TEST_CASE("no_sync accumulates locally; the next synchronised backward averages the sum") {
  on_ranks({2, 4}, check_no_sync);
}
TEST_CASE("unused parameters: named in the error by default, zero with find_unused_parameters") {
  on_ranks({2, 4}, check_unused);
}
TEST_CASE("a destroyed reducer removes its hooks") { on_ranks({2, 4}, check_hooks_removed); }
TEST_CASE("gradient compression: bf16 and f16 on the wire") { on_ranks({2, 4}, check_compression); }
TEST_CASE("timeline: every bucket has ready <= launch <= finish") { on_ranks({2, 4}, check_timeline_order); }

TEST_CASE("overlap: buckets are issued in order on every rank, during backward with overlap, after it without") {
  // A communicator that passes everything on and notes, for each all-reduce, its name and how many
  // of the 12 gradients had been produced (this rank's own grad-ready hooks count them).
  struct Spy final : Communicator {
    Communicator& inner;
    const int& produced;
    std::vector<std::pair<std::string, int>> issued;
    Spy(Communicator& c, const int& p) : inner(c), produced(p) {}
    int rank() const override { return inner.rank(); }
    int size() const override { return inner.size(); }
    const char* backend() const override { return "spy"; }
    MarkPtr mark() override { return inner.mark(); }
    WorkPtr do_all_reduce(Tensor& t, ReduceOp op, const std::string& name) override {
      issued.emplace_back(name, produced);
      return inner.all_reduce(t, op, name);
    }
    WorkPtr do_reduce_scatter(const Tensor& i, Tensor& o, ReduceOp op, const std::string& n) override {
      return inner.reduce_scatter(i, o, op, n);
    }
    WorkPtr do_all_gather(const Tensor& i, Tensor& o, const std::string& n) override {
      return inner.all_gather(i, o, n);
    }
    WorkPtr do_broadcast(Tensor& t, int root, const std::string& n) override { return inner.broadcast(t, root, n); }
    WorkPtr do_reduce(Tensor& t, int root, ReduceOp op, const std::string& n) override {
      return inner.reduce(t, root, op, n);
    }
    WorkPtr do_barrier(const std::string& n) override { return inner.barrier(n); }
  };
  run_ranks(2, [](Communicator& c) {
    for (bool overlap : {true, false}) {
      CAPTURE(overlap);
      int produced = 0;
      Spy spy(c, produced);
      Toy toy;
      ReducerOptions o = small_buckets();
      o.overlap = overlap;
      Reducer red(toy.params, spy, o);
      std::vector<GradReadyHookHandle> count;  // after the reducer's: a launch sees its own gradient uncounted
      for (auto& [name, p] : toy.params) count.push_back(p.register_grad_ready_hook([&](Tensor&) { ++produced; }));
      toy.step(c.rank());
      CHECK(toy.mismatches(c.size()) == 0);
      REQUIRE(spy.issued.size() == 5);
      for (size_t b = 0; b < 5; ++b) CHECK(spy.issued[b].first == "allreduce bucket " + std::to_string(b));
      // Backward produces p11's gradient first (autograd runs the newest node first) and bucket 0
      // holds p11 alone: with overlap it goes before any other gradient is counted and the last
      // bucket from p0's hook (p0 uncounted yet); without overlap all go after backward's last hook.
      CHECK(spy.issued.front().second == (overlap ? 0 : 12));
      CHECK(spy.issued.back().second == (overlap ? 11 : 12));
    }
  });
}
