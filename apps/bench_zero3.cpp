// apps/bench_zero3.cpp: ZeRO-3's step time against ZeRO-2's, with and without prefetch.
//
//   mpiexec -n 2 bench_zero3 --model resnet18 --image-size 32 --batch 32 --steps 20
//   mpiexec -n 2 bench_zero3 --model bert_mini --seq-len 128 --batch 16
//
// Three runs of the same model (same seed, same batches): ZeRO-2, ZeRO-3 with prefetch 1, ZeRO-3
// without prefetch. Each first takes --warmup untimed steps (ZeRO-3's first step is its trace: every
// unit gathered); then the timed steps go round the three in turn, each after a barrier - forward,
// backward, AdamW's step and, for ZeRO-2, the parameter all-gather - so that a machine whose load
// drifts (other jobs on shared cores) slows the three alike. It prints each run's median ms/step
// (the mean over ranks), the ratio to ZeRO-2, the number of units, and the model state the
// allocator holds between steps. The units are dist/zero3.h's default (each block of a Sequential
// or ModuleList: ResNet's blocks, VGG's layers, BertLayers); the root's own layers (ResNet's stem
// and fc, BERT's embeddings and head) are one more. Issue 22's target: ZeRO-3 with prefetch at
// most 1.3x ZeRO-2's at N = 2 on the CPU. Prefetch pays where communication has a thread of its
// own (MPI), so run one process a rank.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

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

struct Batch {
  Tensor x, y, labels;  // images and classes, or token ids and masked-LM labels
};

// One strategy's model, DDP, Zero and AdamW, and its timings.
struct Run {
  const char* name;
  ModulePtr model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::Zero> zero;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<double> secs;
  int64_t state_bytes = 0;  // allocator bytes its model state added (measured right after set-up and warmup)

  Run(const char* label, const Options& o, int stage, int prefetch, dist::Communicator& comm) : name(label) {
    model = models::create_model(o.model, models::is_bert_name(o.model) ? 30522 : 1000, 7);
    dist::DdpOptions ddo;
    ddo.reducer.collective = dist::Collective::ReduceScatter;  // stage 2; stage 3 regroups it by unit
    ddp = std::make_unique<dist::DistributedDataParallel>(model, comm, ddo);
    dist::Zero3Options z3;
    z3.prefetch = prefetch;
    zero = std::make_unique<dist::Zero>(*ddp, stage, z3);
    optim::OptimizerOptions oo;
    oo.lr = 1e-4;
    opt = optim::make_optimizer("adamw", zero->segments(), zero->num_params(), oo);
  }

  double step(const Batch& b) {
    const auto t0 = std::chrono::steady_clock::now();
    zero->zero_grad(*opt);
    Tensor loss = b.labels.defined() ? ddp->forward_with([&](Module& m) {
      return static_cast<models::BertForMaskedLM&>(m).mlm_loss(b.x, Tensor(), Tensor(), b.labels);
    })
                                     : ops::cross_entropy((*ddp)(b.x), b.y);
    loss.backward();
    opt->step();
    zero->gather_parameters();  // ZeRO-2: the all-gather; ZeRO-3: nothing (the next forward gathers)
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

Batch make_batch(const Options& o, int rank) {
  Generator g(100 + rank);  // each rank its own batch
  Batch b;
  if (models::is_bert_name(o.model)) {
    b.x = Tensor::empty({o.batch, o.seq_len}, DType::I64);
    randint_(b.x, 1000, g);
    std::vector<int64_t> l(o.batch * o.seq_len, -100);
    for (size_t i = 0; i < l.size(); i += 7) l[i] = static_cast<int64_t>(i % 1000);  // ~15 % masked positions
    b.labels = Tensor::from_vector_i64(l, {o.batch, o.seq_len});
  } else {
    b.x = randn({o.batch, o.image_size, o.image_size, 3}, g);
    b.y = Tensor::empty({o.batch}, DType::I64);
    randint_(b.y, 1000, g);
  }
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const Options& o, const dist::World& w) {
  dist::Communicator& comm = dist::comm_for(Device::cpu());
  const Batch batch = make_batch(o, w.rank);
  std::vector<std::unique_ptr<Run>> runs;
  const struct { const char* name; int stage, prefetch; } rows[] = {
      {"zero2", 2, 1}, {"zero3 prefetch 1", 3, 1}, {"zero3 prefetch 0", 3, 0}};
  for (const auto& row : rows) {
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    runs.push_back(std::make_unique<Run>(row.name, o, row.stage, row.prefetch, comm));
    for (int s = 0; s < o.warmup; ++s) runs.back()->step(batch);
    runs.back()->state_bytes = memory_stats(Device::cpu()).current_bytes - before;
  }
  for (int s = 0; s < o.steps; ++s)
    for (auto& r : runs) {
      comm.barrier("bench barrier")->wait();
      r->secs.push_back(r->step(batch));
    }
  if (w.rank == 0)
    std::printf("%s, N = %d, batch %d per rank, median of %d steps (round robin)\n%-18s %10s %8s %6s %14s\n",
                o.model.c_str(), w.size, o.batch, o.steps, "strategy", "ms/step", "vs zero2", "units", "state (MiB)");
  double base = 0;
  for (auto& r : runs) {
    Tensor ms = Tensor::from_vector({static_cast<float>(median(r->secs) * 1e3)}, {1});
    comm.all_reduce(ms, dist::ReduceOp::Avg, "bench average")->wait();
    if (base == 0) base = ms.item();
    const size_t units = r->zero->schedule() ? r->zero->schedule()->units().size() : 0;
    if (w.rank == 0)
      std::printf("%-18s %10.1f %8.2f %6zu %14.1f\n", r->name, ms.item(), ms.item() / base, units,
                  r->state_bytes / double(1 << 20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeRO-3 step time against ZeRO-2, with and without prefetch (run under mpiexec)"};
  Options o;
  app.add_option("--model", o.model, "model name (layers/models/models.h): resnet18, vgg11, bert_mini, ...");
  app.add_option("--batch", o.batch, "samples per rank");
  app.add_option("--image-size", o.image_size, "image side for image models");
  app.add_option("--seq-len", o.seq_len, "tokens per sample for BERT models");
  app.add_option("--steps", o.steps, "timed steps per strategy")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps first (ZeRO-3's first step is its trace)");
  CLI11_PARSE(app, argc, argv);
  const dist::World& w = dist::init();
  int rc = 0;
  try {
    bench(o, w);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = 1;
  }
  dist::finalize();
  return rc;
}
