// apps/train_imagenet: data-parallel image classification training, launched with mpiexec.
//
//   mpiexec -n 2 train_imagenet --data data_default --model resnet_tiny --image-size 64 --batch 32
//   mpiexec -n 8 train_imagenet --synthetic --model resnet50 --steps 200 --metrics run.json
//
// One process per rank (GPU local_rank % device_count, or the CPU). Each step: forward through DDP
// (which broadcasts BN buffers), cross-entropy, backward (gradients all-reduced in buckets while
// backward runs), SGD. The LR follows optim/lr_schedule.h, scaled by the world size (Goyal et al.'s
// linear scaling rule) with a warmup that starts from the one-rank LR. Validation after epochs
// reduces correct counts across ranks. Checkpoints (layers/checkpoint.h) are written by rank 0 at
// epoch ends, atomically; --resume continues bit-exactly (same steps, same data order, same LR).
// The summary separates init time (process start -> first step) from training time, and steady
// images/s (first --bench-warmup steps excluded) from the whole-run rate.
// Left out (rejected with an error, never ignored): --amp bf16/fp16 and --zero 1/2.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/train/options.h"  // defines: TrainOptions, parse_options, validate
#include "apps/train/report.h"   // defines: Interval, progress_line, evaluate, device_sync
#include "core/ops/elementwise.h"  // defines: add (the device-side running loss)
#include "core/profile.h"        // defines: enable_trace
#include "core/random.h"         // defines: default_generator (restored on resume)
#include "data/image_folder.h"   // defines: ImageFolder (train/ and val/ splits)
#include "data/synthetic.h"      // defines: SyntheticDataset
#include "dist/ddp.h"            // defines: DistributedDataParallel, DdpOptions
#include "layers/checkpoint.h"   // defines: save_checkpoint, load_checkpoint, latest_checkpoint
#include "layers/models/models.h"  // defines: create_model
#include "optim/lr_schedule.h"   // defines: lr_at
#include "optim/sgd.h"           // defines: SGD

using namespace tandem;
using apps::Clock;
using json = nlohmann::json;

namespace {
// Taken during static initialisation, before main: "init time" includes MPI, NCCL and model setup.
const Clock::time_point kProcessStart = Clock::now();

// Before MPI is up, the launcher's environment says which rank we are (MPICH: PMI_RANK).
bool env_rank0() {
  for (const char* v : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* r = std::getenv(v)) return std::string(r) == "0";
  return true;
}

struct Datasets {
  std::shared_ptr<const data::Dataset> train, val;  // val may be null (no validation)
};

Datasets make_datasets(const apps::TrainOptions& o) {
  Datasets d;
  if (o.synthetic) {
    data::SyntheticOptions so{o.synthetic_size, o.num_classes, o.image_size, o.seed, 0.5f};
    d.train = std::make_shared<data::SyntheticDataset>(so);
    // The first N training samples: a sanity check of the pipeline, not a generalisation measure.
    so.size = o.synthetic_val_size;
    if (so.size > 0) d.val = std::make_shared<data::SyntheticDataset>(so);
    return d;
  }
  data::ImageFolderOptions tr, va;
  tr.transform.size = va.transform.size = o.image_size;
  tr.transform.scale_min = o.crop_scale_min;
  va.train = false;
  namespace fs = std::filesystem;
  d.train = std::make_shared<data::ImageFolder>((fs::path(o.data) / "train").string(), tr);
  if (fs::is_directory(fs::path(o.data) / "val"))
    d.val = std::make_shared<data::ImageFolder>((fs::path(o.data) / "val").string(), va);
  else if (env_rank0())
    std::printf("note: %s has no val/ folder, so there will be no validation\n", o.data.c_str());
  return d;
}

optim::LrScheduleOptions make_schedule(const apps::TrainOptions& o, int world, int64_t spe, int64_t total) {
  optim::LrScheduleOptions s;
  const double scale = o.no_lr_scaling ? 1.0 : world;
  s.base_lr = o.lr * scale;
  s.warmup_steps = o.warmup_steps >= 0    ? o.warmup_steps
                   : o.warmup_epochs >= 0 ? std::llround(o.warmup_epochs * spe)
                   : world > 1            ? std::min(spe, total / 5)  // short runs: at most a fifth
                                          : 0;
  // Goyal et al.: ramp from the one-rank LR to the scaled one; with nothing to scale, from 0.
  s.warmup_start_factor = scale > 1 ? 1.0 / scale : 0.0;
  s.decay = optim::lr_decay_from_name(o.lr_schedule);
  for (double e : o.lr_milestones) s.milestones.push_back(std::llround(e * spe));
  s.gamma = o.lr_gamma;
  s.total_steps = total;
  TANDEM_CHECK(s.decay != optim::LrDecay::Cosine || total > s.warmup_steps, "the cosine schedule needs more steps (",
               total, ") than warmup steps (", s.warmup_steps, "): shorten --warmup-epochs/--warmup-steps");
  return s;
}

int run(apps::TrainOptions& o) {
  dist::InitOptions io;
  io.use_gpu = o.device != "cpu";
  const dist::World& w = dist::init(io);
  const bool rank0 = w.rank == 0;
  TANDEM_CHECK(o.device != "cuda" || w.device.is_cuda(), "--device cuda but no GPU is visible (",
               built_with_cuda() ? "built with CUDA" : "this build has no CUDA backend", "): use --device cpu");
  const Device dev = w.device;

  Datasets ds = make_datasets(o);
  const int classes = ds.train->num_classes();

  // Resume: a file, or the newest checkpoint in --checkpoint-dir ("auto"; none found = fresh start).
  std::string resume = o.resume == "auto" ? latest_checkpoint(o.checkpoint_dir) : o.resume;
  models::ModelOptions mo;
  mo.init = resume.empty();  // a checkpoint overwrites every tensor: skip drawing the init
  ModulePtr model = models::create_model(o.model, classes, o.seed, mo);
  if (o.describe) {
    if (rank0) std::cout << model->describe() << "\n";
    return 0;
  }
  model->to(dev);
  manual_seed(o.seed);

  TrainState state;
  NamedTensors opt_state;
  if (!resume.empty()) {
    Checkpoint ck = load_checkpoint(resume, *model);
    state = ck.state;
    opt_state = std::move(ck.optimizer);
    TANDEM_CHECK(state.model == o.model, "checkpoint '", resume, "' holds a ", state.model, " but --model is ",
                 o.model, ": pass --model ", state.model, " or start without --resume");
    TANDEM_CHECK(state.index_in_epoch == 0 || state.world_size == w.size, "checkpoint '", resume,
                 "' was written mid-epoch by ", state.world_size, " ranks; resume it with mpiexec -n ",
                 state.world_size, " (epoch-end checkpoints resume on any number of ranks)");
    if (auto it = state.rng.find("default"); it != state.rng.end())
      default_generator().set_state(it->second.seed, it->second.offset);
    if (rank0) std::printf("resumed from %s at epoch %lld, step %lld\n", resume.c_str(), (long long)state.epoch,
                           (long long)state.step);
  }

  dist::DdpOptions dopt;
  dopt.reducer.bucketing.first_bucket_bytes = static_cast<size_t>(o.first_bucket_mb * (1 << 20));
  dopt.reducer.bucketing.bucket_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
  dopt.reducer.bucketed = !o.no_bucketing;
  dopt.reducer.overlap = !o.no_overlap;
  dopt.reducer.compression = o.compress == "bf16"   ? dist::Compression::BF16
                             : o.compress == "fp16" ? dist::Compression::F16
                                                    : dist::Compression::None;
  dist::DistributedDataParallel ddp(model, dopt);
  optim::SGDOptions so;
  so.lr = o.lr;
  so.momentum = o.momentum;
  so.weight_decay = o.wd;
  so.nesterov = o.nesterov;
  optim::SGD opt(model->named_parameters(), so);
  if (!opt_state.empty()) opt.load_state(opt_state);

  data::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.num_workers = o.workers;
  lo.seed = o.seed;
  lo.rank = w.rank;
  lo.world_size = w.size;
  lo.device = dev;
  lo.resident = o.synthetic;
  lo.strict = o.strict;
  data::Loader train(ds.train, lo);
  std::unique_ptr<data::Loader> val;
  if (ds.val) {
    data::LoaderOptions vo = lo;
    vo.shuffle = false, vo.pad_shards = false, vo.drop_last = false, vo.resident = false;
    val = std::make_unique<data::Loader>(ds.val, vo);
  }
  const int64_t spe = train.batches_per_epoch();
  TANDEM_CHECK(spe > 0, "the training set (", ds.train->size(), " samples) is smaller than one global batch (",
               o.batch, " x ", w.size, " ranks): lower --batch or use more data");
  const int64_t total = o.steps > 0 ? o.steps : o.epochs * spe;
  const int64_t epochs = (total + spe - 1) / spe;
  const optim::LrScheduleOptions sched = make_schedule(o, w.size, spe, total);
  if (auto it = state.extra.find("total_steps"); rank0 && it != state.extra.end() && it->second != std::to_string(total))
    std::printf("warning: the checkpoint's run was %s steps long, this one is %lld: the LR schedule changes, so "
                "the result will differ from an uninterrupted run (pass the same --epochs/--steps)\n",
                it->second.c_str(), (long long)total);
  const int64_t run_steps = std::max<int64_t>(total - state.step, 0);
  const int64_t bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : std::min<int64_t>(10, run_steps / 4);
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  if (rank0)
    std::printf("%s on %d rank(s) (%s, %s), %lld params, batch %lld/rank, %lld steps/epoch, %lld steps, lr %.4g\n",
                o.model.c_str(), w.size, dev.str().c_str(), dist::comm_for(dev).backend(),
                (long long)model->num_parameters(), (long long)o.batch, (long long)spe, (long long)total,
                sched.base_lr);

  // ---- the loop ----
  json history = json::array();
  apps::EvalResult last_eval;
  double init_s = -1, excluded_s = 0, steady_excluded0 = 0;
  Clock::time_point t_first{}, t_steady{}, t_log{};
  int64_t step = state.step, steady_from = -1, ckpt_count = 0;
  apps::Interval last{};
  Tensor loss_sum;
  double data_ms = 0;
  int64_t iv_steps = 0;
  size_t tl_from = 0;
  data::Batch b;
  const int64_t end_epoch = o.run_epochs > 0 ? std::min(epochs, state.epoch + o.run_epochs) : epochs;
  for (int64_t epoch = state.epoch; epoch < end_epoch && step < total; ++epoch) {
    train.start_epoch(epoch);
    int64_t index = 0;
    if (epoch == state.epoch && state.index_in_epoch > 0) {  // mid-epoch resume: same batches as before
      for (int64_t k = 0; k < state.index_in_epoch / o.batch && train.next(b); ++k) index += o.batch;
    }
    bool epoch_done = false;
    while (step < total) {
      if (!train.next(b)) { epoch_done = true; break; }
      if (init_s < 0) init_s = apps::seconds_since(kProcessStart), t_first = t_log = Clock::now();
      opt.set_lr(optim::lr_at(sched, step));
      Tensor logits = ddp(b.images);
      Tensor loss = ops::cross_entropy(logits, b.labels, static_cast<float>(o.label_smoothing));
      opt.zero_grad();
      loss.backward();
      opt.step();
      ++step, ++iv_steps, index += o.batch, data_ms += b.wait_ms;
      {
        autograd::NoGradGuard ng;  // a device-side running sum: no host sync inside the interval
        loss_sum = loss_sum.defined() ? ops::add(loss_sum, loss.detach()) : loss.detach().clone();
      }
      if (step - state.step == bench_warmup) {
        apps::device_sync(dev);
        t_steady = Clock::now(), steady_from = step, steady_excluded0 = excluded_s;
      }
      if (step % o.log_every == 0 || step == total) {
        // Global loss (mean of per-step means) and last-batch top-1, reduced in one collective.
        double c1 = static_cast<double>(ops::topk_correct(logits, b.labels, 1));
        Tensor s = Tensor::from_vector({float(loss_sum.to_vector()[0]), float(c1), float(b.labels.numel())}, {3});
        dist::comm_for(Device::cpu()).all_reduce(s, dist::ReduceOp::Sum, "progress")->wait();
        std::vector<float> v = s.to_vector();
        last.steps = iv_steps;
        last.wall_ms = apps::seconds_since(t_log) * 1000;
        last.data_ms = data_ms;
        last.loss = v[0] / (iv_steps * w.size);
        last.top1 = v[1] / v[2];
        last.images_per_s = iv_steps * o.batch * w.size / (last.wall_ms / 1000);
        apps::timeline_interval(ddp.timeline(), tl_from, last);
        if (rank0) std::printf("%s\n", apps::progress_line(epoch, step, total, opt.lr(), last, w.size, dev).c_str());
        std::fflush(stdout);
        tl_from = ddp.timeline().steps().size();
        iv_steps = 0, data_ms = 0, loss_sum = Tensor(), t_log = Clock::now();
      }
    }
    epoch_done = epoch_done || index >= spe * o.batch;  // the last step may also end the epoch
    // Validation and checkpoints are paused time: left out of the training rates.
    Clock::time_point t_pause = Clock::now();
    const bool last_step = step >= total || epoch + 1 == end_epoch;
    json h{{"epoch", epoch}, {"step", step}, {"lr", opt.lr()}, {"train_loss", last.loss}, {"train_top1", last.top1}};
    if (val && ((o.val_every > 0 && (epoch + 1) % o.val_every == 0) || last_step)) {
      last_eval = apps::evaluate(*model, *val, classes);
      h["val_top1"] = last_eval.top1, h["val_top5"] = last_eval.top5, h["val_loss"] = last_eval.loss;
      if (rank0)
        std::printf("epoch %lld validation: top1 %.2f%% top5 %.2f%% loss %.4f (%lld images)\n", (long long)epoch,
                    100 * last_eval.top1, 100 * last_eval.top5, last_eval.loss, (long long)last_eval.samples);
    }
    history.push_back(h);
    if (!o.checkpoint_dir.empty() && (epoch_done || last_step)) {
      TrainState s;
      s.step = step;
      s.epoch = epoch_done ? epoch + 1 : epoch;
      s.sampler_epoch = s.epoch;
      s.index_in_epoch = epoch_done ? 0 : index;
      s.world_size = w.size;
      s.model = o.model;
      s.rng["default"] = {default_generator().seed(), default_generator().offset()};
      s.extra["lr_schedule"] = o.lr_schedule;
      s.extra["base_lr"] = std::to_string(sched.base_lr);
      s.extra["total_steps"] = std::to_string(total);
      if (rank0) {
        std::filesystem::create_directories(o.checkpoint_dir);
        std::string path = checkpoint_path(o.checkpoint_dir, s.epoch);
        save_checkpoint(path, *model, opt.state(), s);
        std::printf("checkpoint: %s\n", path.c_str());
        prune_checkpoints(o.checkpoint_dir, o.keep_checkpoints);
      }
      ++ckpt_count;
    }
    excluded_s += apps::seconds_since(t_pause);
    t_log += std::chrono::duration_cast<Clock::duration>(Clock::now() - t_pause);
  }
  apps::device_sync(dev);
  const Clock::time_point t_end = Clock::now();
  const double train_s = init_s < 0 ? 0 : std::chrono::duration<double>(t_end - t_first).count() - excluded_s;
  double steady_ips = 0;
  if (steady_from >= 0 && step > steady_from) {
    double sec = std::chrono::duration<double>(t_end - t_steady).count() - (excluded_s - steady_excluded0);
    steady_ips = (step - steady_from) * o.batch * w.size / sec;
  } else if (train_s > 0) {
    steady_ips = (step - state.step) * o.batch * w.size / train_s;
  }
  if (!o.trace.empty()) dist::write_trace(o.trace);
  const dist::TimelineSummary tl = ddp.timeline().summary();
  const MemoryStats mem = memory_stats(dev);
  const double wall_s = apps::seconds_since(kProcessStart);
  if (rank0) {
    std::printf("done: %lld steps, init %.2f s, train %.2f s, steady %.0f img/s (%.0f/rank), wall %.2f s, %s\n",
                (long long)(step - state.step), std::max(init_s, 0.0), train_s, steady_ips, steady_ips / w.size,
                wall_s, tl.str().c_str());
    if (!o.metrics.empty()) {
      json j{{"app", "train_imagenet"},
             {"tandem_version", kTandemVersion},
             {"model", o.model},
             {"parameters", model->num_parameters()},
             {"world_size", w.size},
             {"device", dev.str()},
             {"backend", dist::comm_for(dev).backend()},
             {"data", o.synthetic ? "synthetic" : o.data},
             {"image_size", o.image_size},
             {"batch_per_rank", o.batch},
             {"global_batch", o.batch * w.size},
             {"base_lr", sched.base_lr},
             {"steps_per_epoch", spe},
             {"steps", step},
             {"steps_this_run", step - state.step},
             {"resumed_from", resume},
             {"epochs", epochs},
             {"init_s", std::max(init_s, 0.0)},
             {"train_s", train_s},
             {"paused_s", excluded_s},
             {"wall_s", wall_s},
             {"images_per_s", steady_ips},
             {"images_per_s_per_rank", steady_ips / w.size},
             {"images_per_s_whole_run", train_s > 0 ? (step - state.step) * o.batch * w.size / train_s : 0.0},
             {"bench_warmup_steps", bench_warmup},
             {"last_interval_ms_per_step",
              {{"total", last.step_ms()}, {"data", last.data_ms / std::max<int64_t>(last.steps, 1)},
               {"compute", last.compute_ms()}, {"exposed_comm", last.exposed_ms}}},
             {"comm", {{"comm_ms_per_step", tl.comm_ms}, {"exposed_ms_per_step", tl.exposed_ms},
                       {"overlap", tl.overlap}, {"steps", tl.steps}}},
             {"ddp", {{"bucket_mb", o.bucket_mb}, {"first_bucket_mb", o.first_bucket_mb}, {"overlap", !o.no_overlap},
                      {"bucketing", !o.no_bucketing}, {"compress", o.compress}}},
             {"memory", {{"current_bytes", mem.current_bytes}, {"peak_bytes", mem.peak_bytes}}},
             {"final", {{"train_loss", last.loss}, {"train_top1", last.top1}, {"val_top1", last_eval.top1},
                        {"val_top5", last_eval.top5}, {"val_loss", last_eval.loss}, {"val_images", last_eval.samples}}},
             {"checkpoints_written", ckpt_count},
             {"skipped_files", train.skipped_files() + (val ? val->skipped_files() : 0)},
             {"history", history}};
      std::filesystem::path mp(o.metrics);
      if (mp.has_parent_path()) std::filesystem::create_directories(mp.parent_path());
      std::ofstream(o.metrics) << j.dump(2) << "\n";
    }
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  apps::TrainOptions o;
  if (int rc = apps::parse_options(argc, argv, o, env_rank0()); rc >= 0) return rc;
  try {
    apps::validate(o);
  } catch (const Error& e) {
    if (env_rank0()) std::cerr << "train_imagenet: " << e.what() << "\nRun with --help for the options.\n";
    return 2;
  }
  int rc = 1;
  try {
    rc = run(o);
  } catch (const std::exception& e) {
    std::cerr << "train_imagenet: error: " << e.what() << "\n";
    // Other ranks may be waiting in a collective this rank will never join: end them all now.
    if (dist::initialized() && dist::world().size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (dist::initialized()) dist::finalize();
  return rc;
}
