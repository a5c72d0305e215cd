// apps/train/setup.h: everything train_imagenet builds before its first step.
//
// The order is part of the run's determinism and is fixed here, in one place: the model is created
// (its init drawn from --seed, or skipped when a checkpoint will overwrite every tensor), moved to
// the device, the default generator reseeded, the checkpoint restored (which may set the generator
// again), and only then wrapped in DDP (which broadcasts rank 0's tensors) and handed to the optimizer and
// the loaders. --amp casts the model before the restore (an AMP checkpoint holds 16-bit weights) and
// builds the f32 masters after DDP and ZeRO, from the broadcast weights (of this rank's shard under
// --zero); the checkpoint's masters then replace them (apps/train/amp.h). --describe stops after the
// model is created, before any of that.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "apps/train/amp.h"      // defines: AmpRun
#include "apps/train/graph_step.h"  // defines: GraphStep (--cuda-graph)
#include "apps/train/options.h"  // defines: TrainOptions
#include "data/dataset.h"        // defines: Dataset
#include "data/loader.h"         // defines: Loader, batch_bytes
#include "dist/transport/bootstrap.h"  // defines: World, init
#include "dist/ddp.h"            // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"  // defines: MemoryLedger
#include "dist/zero.h"           // defines: Zero (--zero 1|2)
#include "dist/extras/parameter_server.h"  // defines: ParameterServer (--strategy ps)
#include "layers/checkpoint.h"   // defines: TrainState
#include "layers/module.h"       // defines: ModulePtr
#include "optim/lr_schedule.h"   // defines: LrScheduleOptions
#include "optim/optimizer.h"     // defines: Optimizer, make_optimizer

namespace tandem::apps {

// Before MPI is up, the launcher's environment says which rank we are (MPICH: PMI_RANK).
bool env_rank0();

struct Datasets {
  std::shared_ptr<const data::Dataset> train, val;  // val may be null (no validation)
};

// Starts MPI (and NCCL on GPUs) and checks that --device can be honoured: --device cuda on a
// machine whose GPU is missing or unusable fails with require_cuda's message (core/device.h).
const dist::World& init_world(const TrainOptions& o);
// --cuda-graph: throws unless this world can capture a step (a GPU, NCCL collectives, no
// TANDEM_FAULT / TANDEM_SYNC_CHECK); the option-only conflicts are validate()'s (options.h).
void check_cuda_graph(const dist::World& w);
// --synthetic, or <data>/train and (when present) <data>/val.
Datasets make_datasets(const TrainOptions& o);
// The model --model names, for `classes` classes; `resume` non-empty skips drawing its init.
ModulePtr make_model(const TrainOptions& o, int classes, const std::string& resume);
// LR schedule for `total` steps of `spe` steps per epoch on `world` ranks (Goyal et al. scaling).
optim::LrScheduleOptions make_schedule(const TrainOptions& o, int world, int64_t spe, int64_t total);

// Validation batches in file order, each sample exactly once over the ranks (no padding).
std::unique_ptr<data::Loader> make_val_loader(const TrainOptions& o, const dist::World& w,
                                              std::shared_ptr<const data::Dataset> val);

// One run's pieces, ready for its first step.
struct Training {
  const dist::World* world = nullptr;
  Device dev;
  Datasets data;
  int classes = 0;
  std::string resumed_from;  // the checkpoint this run continues ("" for a fresh start)
  TrainState start;          // where this run begins (all zeros for a fresh start)
  ModulePtr model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::Zero> zero;      // --zero 1|2 (null: plain DDP); opt then holds this rank's shard
  std::unique_ptr<optim::Optimizer> opt;  // --optimizer, over the parameters, ZeRO's segments or the
                                          // f32 masters under --amp
  std::unique_ptr<AmpRun> amp;            // null for --amp off; masters of the ZeRO shard under --zero
  // --strategy ps: pushes, updates (on the servers only) and pulls in place of opt->step(); DDP then
  // only broadcasts buffers and times the step (its reducer does not communicate). Null for ddp.
  std::unique_ptr<dist::ParameterServer> ps;
  std::unique_ptr<GraphStep> graph;          // --cuda-graph (null: every step eager)
  std::unique_ptr<data::Loader> train, val;  // val null when there is no validation set
  int64_t global_batch = 0;   // --batch x ranks
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;    // of the whole training, across resumes (--steps or --epochs)
  int64_t epochs = 0;         // total_steps in epochs, rounded up
  int64_t end_epoch = 0;      // this invocation stops before it (--run-epochs)
  int64_t bench_warmup = 0;   // steps left out of steady images/s
  optim::LrScheduleOptions sched;
  dist::MemoryLedger ledger;  // predicted at set-up, measured after the first step (apps/train/memory.h)
  int64_t mem_other = 0;      // allocator bytes that are not model state (data, loaders)
};

// Restores `resume` into `model` (when non-empty), then builds DDP (and ZeRO), the optimizer, loaders and
// the schedule.
Training set_up(const TrainOptions& o, const dist::World& w, Datasets ds, ModulePtr model, const std::string& resume);

}  // namespace tandem::apps
