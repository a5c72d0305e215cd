// tests/test_comm_thread.cpp: the thread communicator (dist/transport/comm_thread.h), in one process.
// The collective bodies are the ones MPI and NCCL pass (tests/support/collective_checks.h), at 1 to
// 4 ranks (3: a world size that is not a power of two); then what only this backend promises:
// ranks that disagree or go missing fail with a message naming them, and a failing rank stops the
// others at once instead of leaving them to time out.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "dist/transport/comm_thread.h"
#include "dist/collectives/strings.h"
#include "tests/support/collective_checks.h"
#include "tests/support/collective_values.h"
#include "tests/support/thread_ranks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing;

namespace {
// Runs a collective body on every world size from 1 to 4.
template <typename F>
void on_1_to_4_ranks(F body) {
  on_ranks({1, 2, 3, 4}, [&](Communicator& c) { body(c, Device::cpu()); });
}
}  // namespace

TEST_CASE("all_reduce sum and avg: closed form, every dtype, odd sizes") { on_1_to_4_ranks(check_all_reduce); }
TEST_CASE("all_reduce of a view reduces the view in place and leaves its neighbours alone") {
  on_1_to_4_ranks(check_all_reduce_view);
}
TEST_CASE("ordering: a write before the collective goes in, a write after wait() sees the result") {
  on_1_to_4_ranks(check_stream_handoff);
}
TEST_CASE("reduce_scatter: rank r gets chunk r of the sum") { on_1_to_4_ranks(check_reduce_scatter); }
TEST_CASE("all_gather: chunk q is rank q's input") { on_1_to_4_ranks(check_all_gather); }
TEST_CASE("broadcast from every root, and barrier") { on_1_to_4_ranks(check_broadcast_and_barrier); }
TEST_CASE("wrong sizes are refused before anything is sent") { on_1_to_4_ranks(check_refusals); }

TEST_CASE("reduce: only the root's tensor becomes the sum") {
  run_ranks(3, [](Communicator& c) {
    Tensor t = rank_tensor(6, DType::F32, c.rank());
    c.reduce(t, 1)->wait();
    CHECK(t.to_vector() == rank_tensor(6, DType::F32, c.rank() == 1 ? 5 : c.rank()).to_vector());  // 1+2+3 = 6 = (5+1)
  });
}

TEST_CASE("a collective is started, not finished, until the last rank issues it; all_gather_strings") {
  std::atomic<bool> checked{false};
  run_ranks(2, [&](Communicator& c) {
    Tensor t = rank_tensor(5, DType::F32, c.rank());
    if (c.rank() == 0) {
      WorkPtr w = c.all_reduce(t);  // returns at once: rank 1 has not issued it yet
      CHECK_FALSE(w->done());
      checked = true;
      w->wait();
      CHECK(w->done());
    } else {
      while (!checked) std::this_thread::yield();
      c.all_reduce(t)->wait();
    }
    CHECK(t.to_vector() == rank_tensor(5, DType::F32, 2).to_vector());  // 1 + 2 = 3 = (2 + 1)
    const std::vector<std::string> all = all_gather_strings(c, std::string(c.rank() * 3 + 1, 'a' + c.rank()));
    REQUIRE(all.size() == 2);
    CHECK(all[0] == "a");
    CHECK(all[1] == "bbbb");
  });
}

TEST_CASE("ranks that issue different collectives fail on every rank, naming the first difference") {
  run_ranks(3, [](Communicator& c) {
    Tensor t = Tensor::zeros({c.rank() == 2 ? 5 : 4});
    std::string msg;
    try {
      c.all_reduce(t, ReduceOp::Sum, "bucket")->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("rank 0 issued all_reduce f32 4 -> 4 sum 'bucket' but rank 2 issued all_reduce f32 5 -> 5") !=
          std::string::npos);
    c.barrier()->wait();  // a disagreement fails one collective, not the group
  });
}

TEST_CASE("a rank that never arrives is named after timeout_s") {
  ThreadOptions o;
  o.timeout_s = 0.2;
  auto comms = make_thread_group(3, o);
  Tensor t = Tensor::ones({2});
  comms[0]->all_reduce(t, ReduceOp::Sum, "lonely");
  comms[2]->all_reduce(t, ReduceOp::Sum, "lonely");
  std::string msg;
  try {
    comms[0]->barrier()->wait();  // collective #2: nobody else comes
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("rank(s) 1, 2 did not reach collective #2 (barrier 'barrier')") != std::string::npos);
  CHECK_THROWS_WITH_AS(comms[1]->barrier(), doctest::Contains("the thread communicator's group has failed"), Error);
}

TEST_CASE("run_ranks: a rank that throws stops the others at once; its error comes back with its rank") {
  std::vector<std::string> seen(3);
  CHECK_THROWS_WITH_AS(run_ranks(3, [&](Communicator& c) {
    if (c.rank() == 2) TANDEM_THROW("boom");
    try {
      c.barrier()->wait();
    } catch (const Error& e) {
      seen[c.rank()] = e.what();
      throw;
    }
  }), doctest::Contains("rank 2: "), Error);
  // Not the 60 s timeout's "did not reach": the group failed when rank 2 threw.
  for (int r : {0, 1}) CHECK(seen[r].find("rank 2 failed: ") != std::string::npos);
}

TEST_CASE("split: groups by colour, ranked by key; collectives stay inside a group") {
  run_ranks(4, [](Communicator& c) {
    const int r = c.rank();
    // Colour = parity; key reverses the order, so world 3 is rank 0 of the odd group.
    std::unique_ptr<Communicator> sub = c.split(r % 2, 10 - r);
    CHECK(sub->size() == 2);
    CHECK(sub->rank() == (r < 2 ? 1 : 0));
    CHECK(std::string(sub->backend()) == "threads");
    Tensor t = Tensor::full({3}, r + 1.0);
    sub->all_reduce(t)->wait();
    CHECK(t.to_vector() == std::vector<float>(3, r % 2 ? 2 + 4 : 1 + 3));  // (r+1) summed over my group
    // Splits compose, and the parent keeps working in between.
    c.barrier()->wait();
    std::unique_ptr<Communicator> alone = sub->split(sub->rank(), 0);
    CHECK(alone->size() == 1);
    Tensor u = Tensor::full({2}, 7.0);
    alone->all_reduce(u)->wait();
    CHECK(u.to_vector() == std::vector<float>(2, 7.0f));
    // A second split of the same communicator makes new groups, not the first split's.
    std::unique_ptr<Communicator> all = c.split(0, r);
    CHECK(all->size() == 4);
    CHECK(all->rank() == r);
    CHECK_THROWS_WITH_AS(c.split(-1, 0), doctest::Contains("every rank must join some group"), Error);
  });
}

TEST_CASE("split: a disagreement inside a group names world ranks; a thrown rank stops the sub-groups too") {
  run_ranks(4, [](Communicator& c) {
    std::unique_ptr<Communicator> sub = c.split(c.rank() / 2, c.rank());  // {0, 1}, {2, 3}
    Tensor t = Tensor::zeros({c.rank() == 3 ? 5 : 4});
    std::string msg;
    try {
      sub->all_reduce(t, ReduceOp::Sum, "tp")->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    if (c.rank() >= 2)
      CHECK(msg.find("rank 0 (world rank 2) issued all_reduce f32 4 -> 4 sum 'tp' but rank 1 (world rank 3) issued "
                     "all_reduce f32 5 -> 5") != std::string::npos);
    else
      CHECK(msg.empty());
  });
  std::string seen;
  std::atomic<bool> waiting{false};
  CHECK_THROWS_WITH_AS(run_ranks(4, [&](Communicator& c) {
    std::unique_ptr<Communicator> sub = c.split(c.rank() / 2, c.rank());
    if (c.rank() == 3) {
      while (!waiting) std::this_thread::yield();  // rank 2 is inside its sub-group's barrier
      TANDEM_THROW("boom");
    }
    if (c.rank() != 2) return;
    try {
      WorkPtr w = sub->barrier();
      waiting = true;
      w->wait();  // its partner threw: the root group's failure reaches this sub-group at once
    } catch (const Error& e) {
      seen = e.what();
      throw;
    }
  }), doctest::Contains("rank 3: "), Error);
  CAPTURE(seen);
  CHECK(seen.find("rank 3 failed: ") != std::string::npos);
  CHECK(seen.find("boom") != std::string::npos);
}
