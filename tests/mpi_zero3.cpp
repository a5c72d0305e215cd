// tests/mpi_zero3.cpp: ZeRO-3's prefetch really overlaps the next unit's all-gather with the current
// unit's compute (under mpiexec -n 2 and -n 4: MPI's communication thread moves the bytes while the
// rank computes, which ranks-as-threads, whose collectives run inside the last rank's call, cannot show).
//
// Six 512x512 linears in a Sequential (six units, dist/zero3.h's default policy), 256 rows a rank,
// SGD. The timeline (dist/measure/timeline.h) records, per step, each unit's all-gather (start and
// finish on the communication thread) and each unit's compute between its hooks. Over the pairs of
// units that run one after the other (a, then b), forward and backward, in the steps after the
// traced first (30 pairs):
//   prefetch 1: b's gather starts before a's compute ends - measured 28 to 30 of 30 at -n 2 and -n 4
//               on 2 cores; required: 80 %, since a communication thread that the OS runs late
//               (4 ranks' threads on 2 cores) starts a prefetched gather late too;
//   prefetch 0: b's gather starts only after a's compute ended (b's own pre-hook issues it), 0 of
//               30, always: the contrast that shows the check can fail.
// The ranks stay bit-identical either way.
#include <doctest/doctest.h>

#include <map>

#include "core/ops/ops.h"
#include "dist/transport/bootstrap.h"
#include "dist/zero.h"
#include "layers/layers.h"
#include "tests/support/ddp_fixture.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

constexpr int64_t kWidth = 512, kRows = 256;
constexpr int kUnits = 6, kSteps = 4;

struct Pairs {
  int overlapped = 0, total = 0;  // pairs (a, b) where b's gather started before a's compute ended
};

// Consecutive units of one phase, in the order their compute began (the root, unit 0, left out).
Pairs pairs(const StepTiming& s, bool backward) {
  std::vector<UnitSpan> computes;
  for (const UnitSpan& c : s.computes)
    if (c.backward == backward && c.unit != 0) computes.push_back(c);
  std::sort(computes.begin(), computes.end(), [](const UnitSpan& a, const UnitSpan& b) { return a.begin_us < b.begin_us; });
  std::map<size_t, double> gather_start;  // unit -> its gather's start in this phase
  for (const UnitSpan& g : s.gathers)
    if (g.backward == backward) gather_start[g.unit] = g.begin_us;
  Pairs p;
  for (size_t i = 0; i + 1 < computes.size(); ++i) {
    auto g = gather_start.find(computes[i + 1].unit);
    REQUIRE(g != gather_start.end());  // every unit is gathered again in each phase
    ++p.total;
    p.overlapped += g->second < computes[i].end_us;
  }
  return p;
}

}  // namespace

TEST_CASE("ZeRO-3 prefetch: the next unit's gather starts while the current unit computes, forward and backward") {
  Communicator& comm = comm_for(Device::cpu());
  Generator g(17 + comm.rank());
  const Tensor x = randn({kRows, kWidth}, g);
  const Tensor y = Tensor::from_vector_i64(std::vector<int64_t>(kRows, 3), {kRows});
  for (int prefetch : {1, 0}) {
    CAPTURE(prefetch);
    Generator init(5);
    auto model = std::make_shared<Sequential>();
    for (int i = 0; i < kUnits; ++i) {
      if (i > 0) model->add(std::make_shared<ReLU>());
      model->add(std::make_shared<Linear>(kWidth, kWidth, true, &init));
    }
    DistributedDataParallel ddp(model, comm);
    Zero3Options o;
    o.prefetch = prefetch;
    Zero zero(ddp, 3, o);
    REQUIRE(zero.schedule()->units().size() == kUnits + 1);
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    auto opt = optim::make_optimizer("sgd", zero.segments(), zero.num_params(), oo);
    for (int step = 0; step < kSteps; ++step) {
      zero.zero_grad(*opt);
      ops::cross_entropy(ddp(x), y).backward();
      opt->step();
    }
    const std::vector<StepTiming>& steps = ddp.timeline().steps();
    REQUIRE(steps.size() == kSteps);
    Pairs all;
    for (int step = 1; step < kSteps; ++step)  // step 0 is the trace: everything gathered up front
      for (bool backward : {false, true}) {
        const Pairs p = pairs(steps[step], backward);
        CHECK(p.total == kUnits - 1);
        all.overlapped += p.overlapped, all.total += p.total;
      }
    if (comm.rank() == 0)
      MESSAGE("prefetch ", prefetch, ": ", all.overlapped, " of ", all.total,
              " gathers started during the previous unit's compute (forward and backward, 3 steps)");
    // Prefetch 1: every pair, but for the odd one whose communication thread the OS did not run in
    // time (4 ranks' compute and communication threads share 2 cores in CI). Prefetch 0: none, ever.
    if (prefetch > 0) CHECK(all.overlapped >= 0.8 * all.total);
    else CHECK(all.overlapped == 0);
    const FullParameters weights = zero.full_parameters();
    CHECK(testing::ddp_fixture::bit_identical(comm, *model));
  }
}
