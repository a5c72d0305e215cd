// apps/train_imagenet: data-parallel image classification training, launched with mpiexec.
//
//   mpiexec -n 2 train_imagenet --data data_default --model resnet_tiny --image-size 64 --batch 32
//   mpiexec -n 8 train_imagenet --synthetic --model resnet50 --steps 200 --metrics run.json
//
// One process per rank (GPU local_rank % device_count, or the CPU). Each step is the training-step
// library's (apps/trainer/step.h) with this trainer's loss: forward through DDP (which broadcasts
// BN buffers), cross-entropy, backward (gradients all-reduced in buckets while backward runs), the
// --optimizer (SGD, AdamW or LAMB; --clip-grad-norm clips the global norm first; with --zero 1|2
// each rank updates only its shard, dist/zero.h, then the parameters are all-gathered; --zero 3
// keeps only the shards and gathers each block around its forward and backward; --amp bf16|
// fp16 computes in 16-bit against f32 masters; --strategy ps updates on parameter servers). The LR follows optim/lr_schedule.h, scaled by the world size (Goyal et al.'s
// linear scaling rule) with a warmup that starts from the one-rank LR. Validation after epochs
// reduces correct counts across ranks. Checkpoints (layers/checkpoint.h) are written by rank 0 at
// epoch ends, atomically; --resume continues bit-exactly (same steps, same data order, same LR).
// The summary separates init time (process start -> first step) from training time, and steady
// images/s (first --bench-warmup steps excluded) from the whole-run rate.
// A NaN/inf loss on any rank stops every rank (exit 3, no checkpoint from that state) or, with
// --on-nonfinite skip, skips that step's update everywhere. --evaluate only validates a checkpoint.
// TANDEM_FAULT injects failures on purpose for drills (apps/train/faults.h).
// Preemption (apps/trainer/preemption.h): SIGTERM, SIGUSR1 or SIGINT makes every rank stop at the next
// step boundary, write a checkpoint at that position and exit with status 75; --checkpoint-every N
// and --checkpoint-interval MIN add checkpoints inside epochs. Long host work (a checkpoint write,
// validation, the data-set scan) is announced to dist's watchdog (dist/transport/busy.h), so the
// ranks waiting for it wait on while it advances instead of ending a healthy job.
// The memory ledger (apps/trainer/memory.h) is printed at start-up and in the summary.
// --cuda-graph captures the step as a CUDA graph after 3 eager steps and replays it (apps/trainer/graph_capture.h).
// Combinations that cannot work are refused before training, with the reason (apps/trainer/step_options.h).
//
// Reading order: apps/train/options.h, setup.h, loop.h, validation.h, checkpointing.h, report.h; the
// step itself in apps/trainer/step.h (apps/trainer/clock.h holds every timing).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "apps/train/checkpointing.h"  // defines: resume_path, checkpoint_if_due
#include "apps/train/faults.h"         // defines: fault_from_env, parse_fault
#include "apps/train/loop.h"           // defines: LoopState, train_epoch
#include "apps/train/options.h"        // defines: TrainOptions, parse_options, validate
#include "apps/train/report.h"         // defines: RunRecord, EpochRecord, print_start, report
#include "apps/train/setup.h"          // defines: env_rank0, init_world, make_datasets, make_model, set_up
#include "apps/train/validation.h"     // defines: validate_if_due, evaluate_checkpoint
#include "apps/trainer/clock.h"        // defines: Clock, RunClock
#include "apps/trainer/nonfinite.h"    // defines: RunStopped
#include "apps/trainer/preemption.h"   // defines: RunControl, install_stop_signals, kPreemptedExit
#include "core/check.h"                // defines: Error
#include "dist/transport/bootstrap.h"  // defines: initialized, world, finalize, comm_for
#include "dist/transport/busy.h"       // defines: Busy
#include "dist/transport/watchdog.h"  // defines: abort_job

using namespace tandem;

namespace {
// Taken during static initialisation, before main: "init time" includes MPI, NCCL and model setup.
const trainer::Clock::time_point kProcessStart = trainer::Clock::now();

int run(apps::TrainOptions& o) {
  trainer::RunClock clock(kProcessStart);
  const dist::World& w = apps::init_world(o);
  if (o.describe) {
    // Describing a model needs no data: the class count is --data's folder count or --num-classes.
    const int classes = o.data.empty() ? o.num_classes : apps::make_datasets(o).train->num_classes();
    ModulePtr model = apps::make_model(o, classes, "");
    if (w.rank == 0) std::cout << model->describe() << "\n";
    return 0;
  }
  // A scan reports no progress; 30 min bounds it (ImageNet's 1.3 M files over NFS take minutes), so
  // the ranks already waiting in the first collective wait that long before naming a hung scan.
  apps::Datasets ds;
  {
    dist::Busy scanning("scanning the data set", {.unmeasured_s = 1800});
    ds = apps::make_datasets(o);
  }
  const std::string resume = apps::resume_path(o);
  ModulePtr model = apps::make_model(o, ds.train->num_classes(), resume);
  if (o.evaluate) {
    apps::evaluate_checkpoint(o, w, ds, *model, resume);
    return 0;
  }
  apps::Training t = apps::set_up(o, w, std::move(ds), std::move(model), resume);
  apps::print_start(o, t);

  trainer::RunControl control(dist::comm_for(Device::cpu()),
                              {o.checkpoint_every, o.checkpoint_interval, !o.checkpoint_dir.empty()});
  apps::LoopState loop;
  loop.step = t.start.step;
  loop.fault = apps::fault_from_env(w.size);
  loop.control = &control;
  apps::RunRecord rec;
  for (int64_t epoch = t.start.epoch; epoch < t.end_epoch && loop.step < t.total_steps; ++epoch) {
    const apps::EpochEnd end = apps::train_epoch(t, o, epoch, loop, clock, rec);
    // Validation and checkpoints are paused time: left out of the training rates.
    const trainer::Clock::time_point paused_at = clock.pause();
    const bool last_epoch = loop.step >= t.total_steps || epoch + 1 == t.end_epoch;
    // A stop before this invocation's end is preempted: no validation (a scheduler's grace period is
    // short), the checkpoint at once (inside an epoch train_epoch wrote it), then exit 75. One that
    // came where the invocation ends anyway (the run's last step, --run-epochs' last epoch end)
    // changes nothing.
    const bool ends_here = loop.step >= t.total_steps || (end.done && epoch + 1 == t.end_epoch);
    const bool preempted = end.stopped && !ends_here;
    apps::EpochRecord h{epoch, loop.step, t.step->lr(), rec.last.loss, rec.last.top1, std::nullopt};
    if (!preempted) h.val = apps::validate_if_due(t, o, epoch, last_epoch);
    if (h.val) rec.last_eval = *h.val;
    rec.history.push_back(h);
    if ((!preempted || end.done) &&
        control.save([&] { return apps::checkpoint_if_due(t, o, epoch, loop.step, end.index, end.done, last_epoch); }))
      ++rec.checkpoints_written;
    clock.resume(paused_at);
    if (preempted) {
      if (w.rank == 0) std::printf("%s\n", control.stop_line(loop.step, !o.checkpoint_dir.empty()).c_str());
      std::fflush(stdout);
      return trainer::kPreemptedExit;
    }
  }
  clock.stop(t.dev);
  apps::report(o, t, clock, rec, loop.step);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  trainer::install_stop_signals("train_imagenet");  // first: a signal during start-up is acted on at the first step
  apps::TrainOptions o;
  if (int rc = apps::parse_options(argc, argv, o, apps::env_rank0()); rc >= 0) return rc;
  try {
    apps::validate(o);
    if (const char* f = std::getenv("TANDEM_FAULT"); f && *f) apps::parse_fault(f);  // malformed: stop here
  } catch (const Error& e) {
    if (apps::env_rank0()) std::cerr << "train_imagenet: " << e.what() << "\nRun with --help for the options.\n";
    return 2;
  }
  int rc = 1;
  try {
    rc = run(o);
  } catch (const trainer::RunStopped&) {
    // Every rank stopped at the same step and printed why: an agreed, clean exit.
    if (dist::initialized()) dist::finalize();
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "train_imagenet: error: " << e.what() << "\n";
    // Other ranks may be waiting in a collective this rank will never join: end them all now.
    // abort_job, not a bare MPI_Abort: it gives the launcher time to forward the line above, which
    // MPI_Abort could otherwise lose (test_train_ps saw an empty output when both ranks refused).
    if (dist::initialized() && dist::world().size > 1) dist::abort_job();
    return 1;
  }
  if (dist::initialized()) dist::finalize();
  return rc;
}
