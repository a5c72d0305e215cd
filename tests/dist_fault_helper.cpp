// tests/dist_fault_helper.cpp: a program that fails on purpose, run by test_dist_failures under
// mpiexec. Not a ctest entry itself (its whole point is to end badly).
//   dist_fault_helper mismatch   rank 1 builds a model with a different shape
//   dist_fault_helper die        rank 1 exits with status 3 in the middle of training
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "dist/bootstrap.h"
#include "dist/ddp.h"

using namespace tandem;

namespace {
struct Tiny : Module {
  Tensor w, b;
  explicit Tiny(int64_t in) {
    w = register_parameter("fc.weight", Tensor::ones({4, in}));
    b = register_parameter("fc.bias", Tensor::ones({4}));
  }
  Tensor forward(const Tensor& x) override { return ops::mul(x, w); }
  std::string type_name() const override { return "Tiny"; }
};
}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  const dist::World& world = dist::init();
  try {
    if (std::strcmp(mode, "mismatch") == 0) {
      auto m = std::make_shared<Tiny>(world.rank == 1 ? 5 : 4);
      dist::DistributedDataParallel ddp(m);
      std::printf("[rank %d] no error: the model check missed the difference\n", world.rank);
    } else if (std::strcmp(mode, "die") == 0) {
      Tensor p = Tensor::ones({1000});
      p.set_requires_grad(true);
      dist::Reducer reducer({{"p", p}}, dist::comm_for(Device::cpu()));
      for (int step = 0; step < 1000000; ++step) {
        if (world.rank == 1 && step == 3) {
          std::fprintf(stderr, "[rank 1] exiting on purpose at step 3\n");
          _exit(3);
        }
        p.grad().zero_();
        Tensor y = ops::mul(p, p);
        y.backward(Tensor::ones({1000}));
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", world.rank, e.what());
    dist::finalize();
    return 2;
  }
  dist::finalize();
  return 0;
}
