// apps/bench_zero3.cpp: ZeRO-3's step time against ZeRO-2's, with and without prefetch.
//
//   mpiexec -n 2 bench_zero3 --model resnet18 --image-size 32 --batch 32 --steps 20
//   mpiexec -n 2 bench_zero3 --model bert_mini --seq-len 128 --batch 16
//
// For each strategy - ZeRO-2, ZeRO-3 with prefetch 1, ZeRO-3 without prefetch - it builds the model
// (same seed), runs --warmup untimed steps (ZeRO-3's first step is its trace: every unit gathered),
// then times --steps steps, each after a barrier: forward, backward, AdamW's step and, for ZeRO-2,
// the parameter all-gather. It prints the median ms/step (the mean over ranks), the ratio to
// ZeRO-2, the units, and the model state the allocator holds between steps. The units are
// dist/zero3.h's default (each block of a Sequential or ModuleList: ResNet's blocks, VGG's layers,
// BertLayers); the root's own layers (ResNet's stem and fc, BERT's embeddings and head) are one more.
// Issue 22's target: ZeRO-3 with prefetch at most 1.3x ZeRO-2's at N = 2 on the CPU. Prefetch pays
// where the communication has a thread of its own (MPI), so run it with one process a rank; the
// comparison is only fair on an otherwise idle machine.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/ops/ops.h"
#include "core/random.h"
#include "core/storage.h"
#include "dist/transport/bootstrap.h"
#include "dist/zero.h"
#include "layers/models/bert.h"
#include "layers/models/models.h"

using namespace tandem;

namespace {

struct Options {
  std::string model = "resnet18";
  int batch = 32, image_size = 32, seq_len = 128, steps = 20, warmup = 3;
};

struct Result {
  double ms = 0;              // median step, mean over ranks
  int64_t state_bytes = 0;    // allocator bytes held between steps (model state), rank 0
  size_t units = 0;           // ZeRO-3's units (0: ZeRO-2)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result run(const Options& o, int stage, int prefetch) {
  dist::Communicator& comm = dist::comm_for(Device::cpu());
  const bool bert = models::is_bert_name(o.model);
  Generator g(100 + comm.rank());  // each rank its own batch
  Tensor x, y, labels;
  if (bert) {
    x = Tensor::empty({o.batch, o.seq_len}, DType::I64);
    randint_(x, 1000, g);
    std::vector<int64_t> l(o.batch * o.seq_len, -100);
    for (size_t i = 0; i < l.size(); i += 7) l[i] = i % 1000;  // ~15 % masked positions
    labels = Tensor::from_vector_i64(l, {o.batch, o.seq_len});
  } else {
    x = randn({o.batch, o.image_size, o.image_size, 3}, g);
    y = Tensor::empty({o.batch}, DType::I64);
    randint_(y, 1000, g);
  }
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  Result r;
  {
    ModulePtr model = models::create_model(o.model, bert ? 30522 : 1000, 7);
    dist::DdpOptions ddo;
    if (stage == 2) ddo.reducer.collective = dist::Collective::ReduceScatter;
    dist::DistributedDataParallel ddp(model, comm, ddo);
    dist::Zero3Options z3;
    z3.prefetch = prefetch;
    dist::Zero zero(ddp, stage, z3);
    if (zero.schedule()) r.units = zero.schedule()->units().size();
    optim::OptimizerOptions oo;
    oo.lr = 1e-4;
    auto opt = optim::make_optimizer("adamw", zero.segments(), zero.num_params(), oo);
    auto loss = [&] {
      if (!bert) return ops::cross_entropy(ddp(x), y);
      return ddp.forward_with([&](Module& m) {
        return static_cast<models::BertForMaskedLM&>(m).mlm_loss(x, Tensor(), Tensor(), labels);
      });
    };
    std::vector<double> secs;
    for (int step = 0; step < o.warmup + o.steps; ++step) {
      comm.barrier("bench barrier")->wait();
      const auto t0 = std::chrono::steady_clock::now();
      zero.zero_grad(*opt);
      loss().backward();
      opt->step();
      zero.gather_parameters();  // ZeRO-2: the all-gather; ZeRO-3: nothing (the next forward gathers)
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= o.warmup) secs.push_back(s);
    }
    r.state_bytes = memory_stats(Device::cpu()).current_bytes - before;
    Tensor m = Tensor::from_vector({static_cast<float>(median(secs) * 1e3)}, {1});
    comm.all_reduce(m, dist::ReduceOp::Avg, "bench average")->wait();
    r.ms = m.item();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeRO-3 step time against ZeRO-2, with and without prefetch (run under mpiexec)"};
  Options o;
  app.add_option("--model", o.model, "model name (layers/models/models.h): resnet18, vgg11, bert_mini, ...");
  app.add_option("--batch", o.batch, "samples per rank");
  app.add_option("--image-size", o.image_size, "image side for image models");
  app.add_option("--seq-len", o.seq_len, "tokens per sample for BERT models");
  app.add_option("--steps", o.steps, "timed steps per strategy");
  app.add_option("--warmup", o.warmup, "untimed steps first (ZeRO-3's first step is its trace)");
  CLI11_PARSE(app, argc, argv);
  const dist::World& w = dist::init();
  int rc = 0;
  try {
    struct Row { const char* name; int stage, prefetch; };
    const Row rows[] = {{"zero2", 2, 1}, {"zero3 prefetch 1", 3, 1}, {"zero3 prefetch 0", 3, 0}};
    double base = 0;
    if (w.rank == 0)
      std::printf("%s, N = %d, batch %d per rank, median of %d steps\n%-18s %10s %8s %6s %14s\n", o.model.c_str(),
                  w.size, o.batch, o.steps, "strategy", "ms/step", "vs zero2", "units", "state (MiB)");
    for (const Row& row : rows) {
      const Result r = run(o, row.stage, row.prefetch);
      if (row.stage == 2) base = r.ms;
      if (w.rank == 0)
        std::printf("%-18s %10.1f %8.2f %6zu %14.1f\n", row.name, r.ms, r.ms / base, r.units,
                    r.state_bytes / double(1 << 20));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  dist::finalize();
  return rc;
}
