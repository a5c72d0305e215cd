// tests/test_ddp.cpp: DistributedDataParallel in one process, 2 and 4 ranks as threads
// (dist/transport/comm_thread.h): N ranks x batch b == one process x batch N*b (the experiment of
// tests/support/ddp_fixture.h, also run over MPI by tests/mpi_ddp.cpp), and the model check's
// message when one rank built a different model - which over MPI needs a failure drill
// (tests/dist_fault_helper.cpp), here a plain assertion on every rank.
#include <doctest/doctest.h>

#include <string>

#include "dist/ddp.h"
#include "dist/transport/comm_thread.h"
#include "tests/support/thread_ranks.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;
using tandem::testing::on_ranks;
using namespace tandem::testing::ddp_fixture;

TEST_CASE("N ranks x batch b == 1 process x batch N*b (several buckets or the default one); ranks bit-identical") {
  on_ranks({2, 4}, [](Communicator& c) { check_equivalence_grid(c, Device::cpu(), 1e-5); });
}

TEST_CASE("a rank with a different model: every rank throws, naming the rank and the first difference") {
  run_ranks(3, [](Communicator& c) {
    // Models that differ only in their values pass: DDP then broadcasts rank 0's.
    SmallCnn same(1 + c.rank());
    check_same_model(c, same);
    struct Wider : Module {
      Tensor w;
      explicit Wider(int64_t n) { w = register_parameter("fc.weight", Tensor::zeros({10, n})); }
      Tensor forward(const Tensor& x) override { return x; }
      std::string type_name() const override { return "Wider"; }
    };
    std::string msg;
    try {
      DistributedDataParallel ddp(std::make_shared<Wider>(c.rank() == 2 ? 97 : 96), c);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("rank 2 built a different model than rank 0") != std::string::npos);
    CHECK(msg.find("rank 0 has 'parameter fc.weight f32[10, 96]', rank 2 has 'parameter fc.weight f32[10, 97]'") !=
          std::string::npos);
  });
}
