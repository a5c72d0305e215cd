// apps/train_imagenet: data-parallel image classification training, launched with mpiexec.
//
//   mpiexec -n 2 train_imagenet --data data_default --model resnet_tiny --image-size 64 --batch 32
//   mpiexec -n 8 train_imagenet --synthetic --model resnet50 --steps 200 --metrics run.json
//
// One process per rank (GPU local_rank % device_count, or the CPU). Each step is the training-step
// library's (apps/trainer/step/step.h) with this trainer's loss: forward through DDP (which broadcasts
// BN buffers), cross-entropy, backward (gradients all-reduced in buckets while backward runs), the
// --optimizer (SGD, AdamW or LAMB; --clip-grad-norm clips the global norm first; with --zero 1|2
// each rank updates only its shard, dist/zero.h, then the parameters are all-gathered; --zero 3
// keeps only the shards and gathers each block around its forward and backward; --amp bf16|
// fp16 computes in 16-bit against f32 masters; --strategy ps updates on parameter servers). The LR follows optim/lr_schedule.h, --lr as
// given (--lr-scaling linear: x the world size, Goyal et al.), with a warmup from --lr / world size. Validation after epochs
// reduces correct counts across ranks (a non-finite logit reports a failure, never an accuracy).
// --checkpoint-dir is owned by one run (checkpoint/checkpoint_dir.h: a lock against a second job, a fresh
// start into another run's files refused unless --overwrite-checkpoints, pruning of this run's files
// only), opened before the data is listed (apps/trainer/run/run_folder.h). Checkpoints (layers/
// checkpoint.h) are written by rank 0 at epoch ends and where an invocation stops, atomically, never
// from a non-finite state; --resume continues bit-exactly on the same world size and batch (same
// steps, data order and LR), and on any other one from the same sample of the epoch's order with the
// LR schedule continued in samples (apps/trainer/run/position.h).
// The summary separates init time (process start -> first step) from training time, and steady
// images/s (first --bench-warmup steps excluded) from the whole-run rate.
// A NaN/inf loss or gradient on any rank stops every rank (exit 3, no checkpoint from that state)
// or, with --on-nonfinite skip, skips that step's update everywhere; non-finite weights always stop.
// --weights FILE starts from pretrained weights (torchvision's names, or a checkpoint's model;
// --weights-skip keeps e.g. a new head at its init: apps/trainer/run/start_weights.h). --sync-bn makes
// BatchNorm's batch every rank's; without it the ranks' BN statistics are made one set before
// validation and checkpoints (apps/trainer/step/bn_stats.h), so the logged validation is the saved
// checkpoint's on any number of ranks. --model-ema keeps, validates and saves an EMA of the
// weights (apps/trainer/step/ema.h).
// --evaluate only validates a checkpoint (model, image size and classes from its metadata) or
// --weights FILE. Exit statuses: the table in apps/trainer/run/exit_status.h (0 done, 1 failed, 2 usage -
// a flag, or a checkpoint folder that refuses the run: every rank stops -, 3 non-finite, 65 data,
// 75 preempted).
// TANDEM_FAULT injects failures on purpose for drills (apps/train/faults.h).
// Preemption (apps/trainer/run/preemption.h): SIGTERM, SIGUSR1 or SIGINT makes every rank stop at the next
// step boundary, write a checkpoint at that position and exit with status 75; --checkpoint-every N
// and --checkpoint-interval MIN add checkpoints inside epochs. Long host work (a checkpoint write,
// validation, the data-set scan) is announced to dist's watchdog (dist/transport/busy.h), so the
// ranks waiting for it wait on while it advances instead of ending a healthy job.
// The memory ledger (apps/trainer/run/memory.h) is printed at start-up and in the summary.
// --cuda-graph captures the step as a CUDA graph after 3 eager steps and replays it (apps/trainer/step/graph_capture.h).
// Combinations that cannot work are refused before training, with the reason (apps/trainer/step/step_options.h).
//
// Flags: one vocabulary with train_encoder, --config FILE / --dump-config, a suggestion for a mistyped
// flag (apps/trainer/run/cli.h); --log-file writes JSON lines for apps/scripts/plot_run.py and progress
// lines end with the elapsed time and an ETA (apps/trainer/run/run_log.h).
//
// Reading order: apps/train/options.h, setup.h, loop.h, validation.h, checkpointing.h, report.h; the
// step itself in apps/trainer/step/step.h (apps/trainer/run/clock.h holds every timing).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "apps/train/checkpointing.h"  // defines: save_checkpoint_now
#include "apps/train/restore.h"        // defines: folder_options
#include "apps/train/faults.h"         // defines: fault_from_env, parse_fault
#include "apps/train/loop.h"           // defines: LoopState, train_epoch
#include "apps/train/options.h"        // defines: TrainOptions, parse_options, validate
#include "apps/train/report.h"         // defines: RunRecord, EpochRecord, print_start, report
#include "apps/train/setup.h"          // defines: init_world, make_datasets, make_model, set_up
#include "apps/train/validation.h"     // defines: validate_if_due, evaluate_checkpoint
#include "apps/trainer/step/bn_stats.h"     // defines: sync_bn_statistics
#include "apps/trainer/run/clock.h"        // defines: Clock, RunClock
#include "apps/trainer/run/exit_status.h"  // defines: as_input_error
#include "apps/trainer/run/preemption.h"   // defines: RunControl, kPreemptedExit
#include "apps/trainer/run/run_flags.h"    // defines: trainer_main
#include "apps/trainer/run/run_folder.h"   // defines: RunFolder, resolve_resume_read_only
#include "apps/trainer/run/startup.h"      // defines: check_every_rank
#include "core/check.h"                // defines: Error
#include "dist/transport/bootstrap.h"  // defines: comm_for
#include "dist/transport/busy.h"       // defines: Busy

using namespace tandem;

namespace {
// Taken during static initialisation, before main: "init time" includes MPI, NCCL and model setup.
const trainer::Clock::time_point kProcessStart = trainer::Clock::now();

// apps::validate, then TANDEM_FAULT's syntax: a malformed one stops here, before MPI starts.
void validate(apps::TrainOptions& o) {
  apps::validate(o);
  if (const char* f = std::getenv("TANDEM_FAULT"); f && *f) apps::parse_fault(f);
}

// This rank's --data has the train/ folder the scan reads ("" passed; startup.h's data check).
std::string data_check(const apps::TrainOptions& o) {
  if (o.synthetic || o.data.empty()) return "";
  const std::filesystem::path train = std::filesystem::path(o.data) / "train";
  return std::filesystem::is_directory(train) ? "" : "--data " + o.data + " has no train/ folder on this host (" +
                                                         train.string() + "): every host needs the same data folder";
}

int run(apps::TrainOptions& o) {
  trainer::RunClock clock(kProcessStart);
  const dist::World& w = apps::init_world(o);
  if (o.describe) {
    // Describing a model needs no data: the class count is --data's folder count or --num-classes.
    const int classes = o.data.empty() ? o.num_classes : apps::make_datasets(o).train->num_classes();
    ModulePtr model = apps::make_model(o, classes, "");
    // The model, then the settings (the effective configuration, as --dump-config prints it).
    if (w.rank == 0) std::cout << model->describe() << "\n" << o.effective_config;
    return 0;
  }
  if (o.evaluate) {
    // Reads the folder without owning it: a training job may hold its lock.
    ReadHold reading;  // a trainer pruning the folder leaves the chosen file alone until we are done
    const std::string resume = trainer::resolve_resume_read_only(o.checkpoint_dir, o.resume, o.run_id, w, &reading);
    apps::evaluate_checkpoint(o, w, resume);
    return 0;
  }
  // The checkpoint folder before the data: a refused or unwritable folder stops the job in seconds.
  trainer::RunFolder folder = trainer::RunFolder::open(apps::folder_options(o), w, "train_imagenet");
  // Every rank's folder, resume file and data on its host, in one verdict before the data scan: a
  // host that lacks them stops the job now, named, instead of hanging it (apps/trainer/run/startup.h).
  trainer::check_every_rank(folder, folder.resume_path(), w, "train_imagenet", [&] { return data_check(o); });
  // A scan reports no progress; 30 min bounds it (ImageNet's 1.3 M files over NFS take minutes), so
  // the ranks already waiting in the first collective wait that long before naming a hung scan.
  apps::Datasets ds;
  {
    dist::Busy scanning("scanning the data set", {.unmeasured_s = 1800});
    ds = trainer::as_input_error([&] { return apps::make_datasets(o); });
  }
  ModulePtr model = apps::make_model(o, ds.train->num_classes(), folder.resume_path());
  apps::Training t = apps::set_up(o, w, std::move(ds), std::move(model), std::move(folder));
  apps::measure_memory_after_first_update(t);
  // Room for one checkpoint, now rather than at the first save.
  t.folder.reserve(trainer::checkpoint_size_estimate(t.model.get(), o.optimizer, o.amp != "off", t.folder.resume_path()),
                   w);
  apps::print_start(o, t);
  apps::start_records(o, t);  // config_<run-id>.toml beside the checkpoints, the --log-file's start record

  trainer::RunControl control(dist::comm_for(Device::cpu()),
                              {o.checkpoint_every, o.checkpoint_interval, !o.checkpoint_dir.empty()});
  apps::LoopState loop;
  loop.pos = t.start_at;
  loop.fault = apps::fault_from_env(w.size);
  loop.control = &control;
  apps::RunRecord rec;
  while (apps::steps_left(t, loop)) {
    const apps::EpochEnd end = apps::train_epoch(t, o, loop, clock, rec);
    // Validation and checkpoints are paused time: left out of the training rates.
    const trainer::RunClock::Paused paused(clock);
    const bool last = !apps::steps_left(t, loop);  // this invocation's last epoch
    // A stop before this invocation's end is preempted: no validation (a scheduler's grace period is
    // short), the checkpoint at once (inside an epoch train_epoch wrote it), then exit 75. One that
    // came where the invocation ends anyway (the run's last step, --run-epochs' last epoch end)
    // changes nothing.
    const bool preempted = end.stopped && !last;
    // One set of BN statistics on every rank before validation and the checkpoint read them: the
    // average at an epoch end, rank 0's inside one (apps/trainer/step/bn_stats.h says why each).
    if (!o.step.sync_batchnorm)
      trainer::sync_bn_statistics(*t.model, dist::comm_for(t.dev),
                                  end.done ? trainer::BnSync::Average : trainer::BnSync::FromRank0);
    apps::EpochRecord h{end.epoch, loop.pos.step, t.step->lr(), rec.last.loss, rec.last.top1, std::nullopt};
    if (!preempted) h.val = apps::validate_if_due(t, o, end.epoch, last);
    if (h.val) rec.last_eval = *h.val, apps::log_validation(t, h, loop.pos.samples);
    rec.history.push_back(h);
    if (end.done || last) control.save([&] { return apps::save_checkpoint_now(t, o, loop.pos); });
    if (preempted) return control.exit_preempted(loop.pos.step, !o.checkpoint_dir.empty(), w.rank == 0);
  }
  return trainer::finish_run(*t.step, clock, t.dev, control, rec,
                             [&] { apps::report(o, t, clock, rec, loop.pos.step); });
}
}  // namespace

int main(int argc, char** argv) {
  return trainer::trainer_main<apps::TrainOptions>("train_imagenet", argc, argv, apps::parse_options, validate, run);
}
