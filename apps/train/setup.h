// apps/train/setup.h: everything train_imagenet builds before its first step.
//
// The order is part of the run's determinism and is fixed here, in one place: the model is created
// (its init drawn from --seed, or skipped when a checkpoint will overwrite every tensor), moved to
// the device, the default generator reseeded, and the training step built around it
// (apps/trainer/step/step.h), which keeps its own fixed order: the backend settings, --amp's cast (an AMP
// checkpoint holds 16-bit weights), the checkpoint's restore (which may set the generator again;
// the Step calls back into restore_checkpoint for it), DDP (which broadcasts rank 0's tensors),
// ZeRO, the f32 masters, the optimizer, the parameter server, and the checkpoint's optimizer state
// and masters. Then the loaders, the run's length and schedule in samples (apps/trainer/run/position.h)
// and the memory ledger. --describe stops after the model is created, before any of that.
// The checkpoint folder is opened before all of this, right after MPI is up (train_imagenet.cpp):
// a bad folder or another run's files stop the job in seconds, before the data is listed.
// One class list: train/'s folder names label train/ and val/ (val/ maps its folders to it by
// name), are saved in every checkpoint, and a resume checks them against train/'s; --evaluate
// labels val/ with the checkpoint's list when it has one.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "apps/train/options.h"   // defines: TrainOptions
#include "apps/trainer/step/ema.h"     // defines: ModelEma
#include "apps/trainer/run/memory.h"  // defines: MemoryMeter
#include "apps/trainer/run/position.h"    // defines: Position, RunLength
#include "apps/trainer/run/run_folder.h"  // defines: RunFolder
#include "apps/trainer/step/step.h"    // defines: Step
#include "data/dataset.h"         // defines: Dataset
#include "data/loader.h"          // defines: Loader, Batch, batch_bytes
#include "dist/transport/bootstrap.h"       // defines: World, init
#include "checkpoint/checkpoint.h"    // defines: TrainState
#include "layers/module.h"        // defines: ModulePtr
#include "apps/trainer/run/run_log.h"  // defines: RunLog
#include "optim/lr_schedule.h"    // defines: LrScheduleOptions

namespace tandem::apps {


struct Datasets {
  std::shared_ptr<const data::Dataset> train, val;  // val may be null (no validation); train null for --evaluate
  std::vector<std::string> classes;  // class names in label order (train/'s folders); empty for --synthetic
};

// Starts MPI (and NCCL on GPUs) and checks that --device can be honoured: --device cuda on a
// machine whose GPU is missing or unusable fails with require_cuda's message (core/device.h). Then
// the step's refusals that depend on the world (--cuda-graph: a GPU, NCCL collectives, no
// TANDEM_FAULT / TANDEM_SYNC_CHECK; apps/trainer/step/step_options.h refusal_on), before any data work.
const dist::World& init_world(const TrainOptions& o);
// --synthetic, or <data>/train and (when present) <data>/val, labelled with train/'s class list.
Datasets make_datasets(const TrainOptions& o);
// --evaluate: the validation split alone, labelled with `classes` (a checkpoint's list; empty:
// train/'s folder names, as the run that wrote it saw them).
Datasets make_eval_datasets(const TrainOptions& o, const std::vector<std::string>& classes);
// The model --model names, for `classes` classes; `resume` non-empty skips drawing its init.
ModulePtr make_model(const TrainOptions& o, int classes, const std::string& resume);
// The LR schedule of a run of length `len` on `world` ranks (--lr-scaling's rule), in the unit
// position.h says; `fresh_global_batch`: the fresh start's G (what --warmup-steps counts).
optim::LrScheduleOptions make_schedule(const TrainOptions& o, int world, const trainer::RunLength& len,
                                       int64_t fresh_global_batch);

// Validation batches in file order, each sample exactly once over the ranks (no padding).
std::unique_ptr<data::Loader> make_val_loader(const TrainOptions& o, const dist::World& w,
                                              std::shared_ptr<const data::Dataset> val);

// One run's pieces, ready for its first step.
struct Training {
  const dist::World* world = nullptr;
  Device dev;
  Datasets data;
  int classes = 0;
  trainer::RunFolder folder; // --checkpoint-dir, owned by this run (rank 0 writes through it)
  std::string resumed_from;  // the checkpoint this run continues ("" for a fresh start)
  TrainState start;          // the checkpoint's state (all zeros for a fresh start)
  trainer::Position start_at;  // where this invocation begins
  ModulePtr model;
  // DDP / ZeRO / the parameter server, --amp, the optimizer, clipping, --cuda-graph, the
  // non-finite policy and the backend settings (apps/trainer/step/step.h).
  std::unique_ptr<trainer::Step> step;
  std::unique_ptr<data::Loader> train, val;  // val null when there is no validation set
  int64_t global_batch = 0;   // --batch-size x --grad-accum-steps x ranks
  int64_t fresh_global_batch = 0;  // the fresh start's (the --steps schedule's unit, position.h)
  int64_t steps_per_epoch = 0;
  trainer::RunLength length;  // --epochs or --steps, in samples; where the schedule stands
  int64_t total_steps = 0;    // where the step count will end: start_at.step + the steps left at this G
  int64_t epochs = 0;         // the run's length in epochs (--steps: rounded up)
  int64_t end_epoch = 0;      // this invocation stops before it (--run-epochs; else none)
  int64_t end_step = 0;       // this invocation stops there (--run-steps; else total_steps)
  int64_t bench_warmup = 0;   // steps left out of steady images/s
  optim::LrScheduleOptions sched;
  trainer::MemoryMeter memory;  // predicted at set-up, measured after the first step (apps/trainer/run/memory.h)
  trainer::RunLog log;          // --log-file (rank 0; disabled elsewhere and without one): report.h start_records
  // --model-ema: the average of the weights (apps/trainer/step/ema.h); null without it.
  std::unique_ptr<trainer::ModelEma> ema;
};

// Bytes of data batches on the allocator, which the memory ledger does not count as model state:
// what the loaders hold (prefetched batches, the resident batch), --cuda-graph's static copy of the
// batch (the Step's, allocated by the first step) and the batch the step has in hand (its bytes,
// `in_hand`). A resident loader hands out its resident batch itself, which bytes_held() already counts.
int64_t data_bytes(const Training& t, int64_t in_hand);
// Measures the memory ledger (apps/trainer/run/memory.h) after the Step's first applied update,
// when the optimizer state exists, through a post-update hook, so the loop does not. Call it on the
// Training set_up returned (the hook holds its address).
void measure_memory_after_first_update(Training& t);

// Builds the step around `model` (restoring folder.resume_path() into it when non-empty), then the
// loaders, the run's length and schedule and the memory ledger.
Training set_up(const TrainOptions& o, const dist::World& w, Datasets ds, ModulePtr model, trainer::RunFolder folder);

}  // namespace tandem::apps
