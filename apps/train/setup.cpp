// apps/train/setup.cpp: builds a Training (see setup.h for why the order is fixed).
#include "apps/train/setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "apps/train/restore.h"           // defines: restore_checkpoint
#include "apps/trainer/step/graph_capture.h"   // defines: GraphCapture::kEagerSteps
#include "apps/trainer/run/start_weights.h"   // defines: load_start_weights
#include "core/host_cache.h"  // defines: keep_freed_heap
#include "core/device.h"                  // defines: require_cuda
#include "core/profile.h"                 // defines: enable_trace
#include "core/random.h"               // defines: manual_seed
#include "core/threads.h"  // defines: configure_cpu_threads
#include "data/image_folder.h"         // defines: ImageFolder (train/ and val/ splits)
#include "data/synthetic.h"            // defines: SyntheticDataset
#include "layers/models/models.h"      // defines: create_model

namespace tandem::apps {

const dist::World& init_world(const TrainOptions& o) {
  host_cache::keep_freed_heap();  // a step's temporaries reuse mapped memory (core/host_cache.h)
  dist::InitOptions io;
  io.use_gpu = o.device != "cpu";
  // Before MPI: the same clear error on every rank (CUDA's own error and driver/runtime versions).
  if (o.device == "cuda") require_cuda("train_imagenet --device cuda");
  const dist::World& w = dist::init(io);
  // CPU kernels: cores / ranks-on-this-node threads each (core/threads.h), so ranks never oversubscribe.
  if (w.device.is_cpu()) configure_cpu_threads(w.local_size);
  TANDEM_CHECK(o.device != "cuda" || w.device.is_cuda(), "--device cuda but dist::init chose ", w.device.str(),
               ": use --device cpu");
  trainer::check_on(step_options(o), w.device, dist::comm_for(w.device).backend());
  return w;
}

namespace {
namespace fs = std::filesystem;

data::ImageFolderOptions val_folder_options(const TrainOptions& o, std::vector<std::string> classes) {
  data::ImageFolderOptions va;
  va.transform.size = o.val_crop_size > 0 ? o.val_crop_size : o.image_size;
  va.transform.resize_size = o.val_resize_size;  // 0: size x 256/224 (data/transforms.h)
  va.train = false;
  va.classes = std::move(classes);  // val/ maps its folders to this list by name
  return va;
}
}  // namespace

// Files the split leaves out (not .jpg/.jpeg/.png/.bmp), said once so a folder of .webp is not
// silently a smaller data set.
static void note_not_images(const data::ImageFolder& f) {
  if (f.not_images() > 0 && trainer::env_rank0())
    std::printf("warning: %lld file(s) below the class folders are not .jpg/.jpeg/.png/.bmp and are skipped (e.g. %s); "
                "convert them (.webp, .gif, .tif) to JPEG or PNG to train on them\n",
                (long long)f.not_images(), f.not_image_example().c_str());
}

Datasets make_datasets(const TrainOptions& o) {
  Datasets d;
  if (o.synthetic) {
    data::SyntheticOptions so{o.synthetic_size, o.num_classes, o.image_size, o.seed, 0.5f};
    d.train = std::make_shared<data::SyntheticDataset>(so);
    // The first N training samples: a sanity check of the pipeline, not a generalisation measure.
    so.size = o.synthetic_val_size;
    if (so.size > 0) d.val = std::make_shared<data::SyntheticDataset>(so);
    return d;
  }
  data::ImageFolderOptions tr;
  tr.transform.size = o.image_size;
  tr.transform.scale_min = o.crop_scale_min;
  const std::string train_dir = (fs::path(o.data) / "train").string();
  auto train = std::make_shared<data::ImageFolder>(train_dir, tr);
  note_not_images(*train);
  d.classes = train->classes();
  d.train = std::move(train);
  // As --synthetic --num-classes 1 is: a classifier of one class learns nothing (its loss is 0).
  TANDEM_CHECK(d.train->num_classes() >= 2, train_dir, " holds ", d.train->num_classes(), " class folder",
               d.train->num_classes() == 1 ? " ('" + d.classes.at(0) + "')" : std::string("s"),
               "; a classifier needs at least 2 (one folder per class, train/<class>/<image>)");
  TANDEM_CHECK(!o.num_classes_set || o.num_classes == d.train->num_classes(), "--num-classes ", o.num_classes,
               " does not match the ", d.train->num_classes(), " class folders in ", train_dir,
               ": drop --num-classes (with --data the class folders set it)");
  // val/ is labelled with train/'s list: a class val/ lacks leaves every other label where it was.
  if (fs::is_directory(fs::path(o.data) / "val")) {
    auto val = std::make_shared<data::ImageFolder>((fs::path(o.data) / "val").string(), val_folder_options(o, d.classes));
    note_not_images(*val);
    d.val = std::move(val);
  } else if (trainer::env_rank0()) {
    std::printf("note: %s has no val/ folder, so there will be no validation\n", o.data.c_str());
  }
  return d;
}

Datasets make_eval_datasets(const TrainOptions& o, const std::vector<std::string>& classes) {
  if (o.synthetic || classes.empty()) {
    Datasets d = make_datasets(o);
    d.train.reset();  // --evaluate reads val/ only; train/ gave the class list
    return d;
  }
  Datasets d;
  d.classes = classes;
  if (fs::is_directory(fs::path(o.data) / "val"))
    d.val = std::make_shared<data::ImageFolder>((fs::path(o.data) / "val").string(), val_folder_options(o, classes));
  return d;
}

ModulePtr make_model(const TrainOptions& o, int classes, const std::string& resume) {
  models::ModelOptions mo;
  mo.init = resume.empty();  // a checkpoint overwrites every tensor: skip drawing the init
  return models::create_model(o.model, classes, o.seed, mo);
}

optim::LrScheduleOptions make_schedule(const TrainOptions& o, int world, const trainer::RunLength& len,
                                       int64_t fresh_global_batch) {
  optim::LrScheduleOptions s;
  // One rule in both trainers (options.h): --lr as given; --lr-scaling linear: x world size.
  const double scale = o.lr_scaling == "linear" ? world : 1.0;
  s.base_lr = o.lr * scale;
  // An epoch in the schedule's unit (position.h): spe itself while the global batch is the fresh start's.
  const double spe = len.unit_steps_per_epoch();
  const int64_t total = len.schedule_total();
  s.warmup_steps = o.warmup_steps >= 0    ? len.unit_steps(o.warmup_steps, fresh_global_batch)
                   : o.warmup_epochs >= 0 ? std::llround(o.warmup_epochs * spe)
                   : world > 1            ? std::min<int64_t>(std::llround(spe), total / 5)  // short runs: a fifth
                                          : 0;
  // Goyal et al.: ramp from the LR one rank would use (base / world size) up to the peak, whether
  // the peak was scaled here or by the user (--lr 0.2 on 2 ranks ramps from 0.1, as before the rule
  // changed); on one rank, from 0.
  s.warmup_start_factor = world > 1 ? 1.0 / world : 0.0;
  // "linear" is poly with power 1 (HF's name for BERT's decay, and train_encoder's default).
  s.decay = optim::lr_decay_from_name(o.lr_schedule == "linear" ? "poly" : o.lr_schedule);
  for (double e : o.lr_milestones) s.milestones.push_back(std::llround(e * spe));
  s.gamma = o.lr_gamma;
  s.total_steps = total;
  s.power = o.lr_schedule == "linear" ? 1.0 : o.lr_power;
  s.min_lr = o.lr_min;  // absolute, as torchvision's CosineAnnealingLR(eta_min=args.lr_min)
  const bool decays = s.decay == optim::LrDecay::Cosine || s.decay == optim::LrDecay::Poly;
  TANDEM_CHECK(!decays || total > s.warmup_steps, "the ", o.lr_schedule, " schedule needs more steps (",
               total, ") than warmup steps (", s.warmup_steps, "): shorten --warmup-epochs/--warmup-steps");
  return s;
}

namespace {
// The training loader's settings; the validation loader starts from them.
data::LoaderOptions train_loader_options(const TrainOptions& o, const dist::World& w) {
  // A loader batch holds a whole optimizer step (--grad-accum-steps micro-batches, sliced in the
  // loop): the data order, epochs and positions in samples are those of one batch of that size.
  // The rest keep LoaderOptions' defaults.
  return {.batch_size = o.batch * o.step.grad_accum_steps,
          .num_workers = o.workers,
          .seed = o.seed,
          .rank = w.rank,
          .world_size = w.size,
          .device = w.device,
          .strict = o.strict,
          .resident = o.synthetic};
}
}  // namespace

std::unique_ptr<data::Loader> make_val_loader(const TrainOptions& o, const dist::World& w,
                                              std::shared_ptr<const data::Dataset> val) {
  data::LoaderOptions vo = train_loader_options(o, w);
  vo.shuffle = false, vo.pad_shards = false, vo.drop_last = false, vo.resident = false;
  vo.batch_size = o.batch;  // no accumulation in validation: a micro-batch's memory
  return std::make_unique<data::Loader>(std::move(val), vo);
}

namespace {

// Shuffled, sharded training batches; validation in file order, every sample exactly once.
void make_loaders(const TrainOptions& o, Training& t) {
  t.train = std::make_unique<data::Loader>(t.data.train, train_loader_options(o, *t.world));
  if (t.data.val) t.val = make_val_loader(o, *t.world, t.data.val);
}

// The extra.<key> of the checkpoint this run resumed ("" when absent, or on a fresh start).
std::string extra(const Training& t, const std::string& key) {
  auto it = t.start.extra.find(key);
  return it == t.start.extra.end() ? "" : it->second;
}

// Warns when the resumed run's length is not the checkpoint's: the LR schedule then changes. Only a
// changed --epochs/--steps does that; another world size or --batch does not (position.h).
void warn_if_length_changed(const TrainOptions& o, const Training& t) {
  if (t.world->rank != 0 || t.resumed_from.empty()) return;
  const std::string was_epochs = extra(t, "epochs"), was_steps = extra(t, "steps");
  std::string was, now = o.steps > 0 ? std::to_string(o.steps) + " steps" : std::to_string(o.epochs) + " epochs";
  if (!was_epochs.empty()) {
    was = was_epochs + " epochs";
  } else if (!was_steps.empty()) {
    was = was_steps + " steps";
  } else if (const std::string total = extra(t, "total_steps");
             !total.empty() && t.start.world_size == t.world->size && t.start.global_batch <= 0) {
    // A file from before lengths were kept: its total_steps counted steps at the world size that
    // wrote it (the batch unknown: assumed the same).
    was = total + " steps", now = std::to_string(t.length.schedule_total()) + " steps";
  }
  if (!was.empty() && was != now)
    std::printf("warning: the checkpoint's run was %s long, this one is %s: the LR schedule changes, so the result "
                "will differ from an uninterrupted run (pass the same --epochs/--steps)\n",
                was.c_str(), now.c_str());
}

// Steps per epoch, the run's length in samples, where this invocation stops, and the LR schedule
// (apps/trainer/run/position.h).
void plan_steps(const TrainOptions& o, Training& t) {
  const int64_t spe = t.steps_per_epoch = t.train->batches_per_epoch();
  TANDEM_CHECK(spe > 0, "the training set (", t.data.train->size(), " samples) is smaller than one global batch (",
               o.batch * o.step.grad_accum_steps, " x ", t.world->size, " ranks): lower --batch-size or use more data");
  // The fresh start's global batch: the --steps schedule's unit and what --warmup-steps counts.
  const std::string unit = extra(t, "schedule_global_batch");
  t.fresh_global_batch = !unit.empty()              ? std::stoll(unit)
                         : t.start.global_batch > 0 ? t.start.global_batch
                                                    : t.global_batch;  // a fresh start, or a file that did not say
  trainer::RunLength& len = t.length;
  len.global_batch = t.global_batch;
  len.steps_per_epoch = spe;
  if (o.steps > 0) {
    len.unit_batch = t.fresh_global_batch;
    len.total_samples = o.steps * len.unit_batch;
    t.epochs = (len.total_samples + spe * t.global_batch - 1) / (spe * t.global_batch);
  } else {
    len.epochs = t.epochs = o.epochs;
  }
  const trainer::Position& at = t.start_at;
  t.total_steps = at.step + len.steps_left(at, t.train->batches_per_epoch(at.epoch_offset));
  t.end_epoch = o.run_epochs > 0 ? at.epoch + o.run_epochs : std::numeric_limits<int64_t>::max();
  t.end_step = o.run_steps > 0 ? std::min(t.total_steps, at.step + o.run_steps) : t.total_steps;
  t.sched = make_schedule(o, t.world->size, len, t.fresh_global_batch);
  warn_if_length_changed(o, t);
  const int64_t run_steps = std::max<int64_t>(t.end_step - at.step, 0);
  int64_t warmup = std::min<int64_t>(10, run_steps / 4);
  // --cuda-graph: the default window also leaves out the eager steps and the capturing one, whose
  // time includes capture and instantiation, where the run has steps after them to measure.
  constexpr int64_t kGraphWarmup = trainer::GraphCapture::kEagerSteps + 1;
  if (o.step.cuda_graph && run_steps > kGraphWarmup) warmup = std::max(warmup, kGraphWarmup);
  t.bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : warmup;
}

}  // namespace

namespace {

// --model-ema: the average starts from the weights the run starts from (after DDP's broadcast), or
// continues the checkpoint's. Before the memory ledger's plan(): ema.h says why.
void start_ema(const TrainOptions& o, Training& t, NamedTensors from_checkpoint) {
  const bool rank0 = t.world->rank == 0;
  if (!o.model_ema) {
    if (!from_checkpoint.empty() && rank0)
      std::printf("note: the checkpoint holds an EMA of the weights; without --model-ema it is not kept, and this "
                  "run's checkpoints will not have it\n");
    return;
  }
  t.ema = std::make_unique<trainer::ModelEma>(*t.model, o.model_ema_decay);
  if (!from_checkpoint.empty()) t.ema->load_state(from_checkpoint, "checkpoint '" + t.resumed_from + "'");
  else if (!t.resumed_from.empty() && rank0)
    std::printf("note: the checkpoint has no EMA of the weights: --model-ema starts its average from them\n");
}

}  // namespace

int64_t data_bytes(const Training& t, int64_t in_hand) {
  int64_t held = t.train->bytes_held() + (t.val ? t.val->bytes_held() : 0) + t.step->static_batch_bytes();
  if (!t.train->options().resident) held += in_hand;
  return held;
}

void measure_memory_after_first_update(Training& t) {
  t.memory.measure_at_first_update(*t.step, [&t] { return data_bytes(t, t.step->batch_bytes()); });
}

namespace {

// --memory-budget-mib (apps/trainer/run/memory.h): refuses on every rank alike (exit 2) a run whose
// predicted bytes per rank exceed it, naming the --zero stages whose prediction fits.
void check_budget(const TrainOptions& o, Training& t) {
  const double budget = o.memory_budget_mib * (1 << 20);
  const double bytes = trainer::agreed_max(dist::comm_for(Device::cpu()), trainer::budgeted_bytes(t.memory.ledger()));
  if (bytes <= budget) return;
  const dist::LedgerOptions lo = t.step->ledger_options();
  std::vector<trainer::Layout> others;
  for (int zero = 1; zero <= 3; ++zero)
    if (zero != o.zero)
      others.push_back({"--zero " + std::to_string(zero),
                        trainer::budgeted_bytes(trainer::predict_layout(lo, zero, lo.world, lo.params))});
  char budget_name[64];
  std::snprintf(budget_name, sizeof budget_name, "--memory-budget-mib %g", o.memory_budget_mib);
  throw trainer::UsageError(trainer::budget_refusal(
      bytes, t.memory.ledger(), budget, "--zero " + std::to_string(o.zero) + " on " + std::to_string(lo.world) + " ranks",
      budget_name, std::move(others)));
}

}  // namespace

Training set_up(const TrainOptions& o, const dist::World& w, Datasets ds, ModulePtr model, trainer::RunFolder folder) {
  Training t;
  t.world = &w;
  t.dev = w.device;
  t.data = std::move(ds);
  t.classes = t.data.train->num_classes();
  t.global_batch = o.batch * o.step.grad_accum_steps * w.size;
  t.folder = std::move(folder);
  const std::string resume = t.folder.resume_path();
  t.resumed_from = resume;
  t.model = std::move(model);
  t.model->to(t.dev);
  manual_seed(o.seed);
  // The checkpoint (or --weights) goes in after --amp's cast and before DDP's broadcast; the Step
  // calls back here. A checkpoint's EMA entries are the EMA's, not the Step's (apps/trainer/step/ema.h).
  NamedTensors ema_state;
  auto restore = [&](Module& m) {
    if (!o.weights.empty()) trainer::load_start_weights(o.weights, m, o.weights_skip, {}, w.rank == 0);
    if (resume.empty()) return NamedTensors{};
    Restored r = restore_checkpoint(resume, m, o, w, t.data.classes);
    ema_state = trainer::ModelEma::take_state(r.optimizer);
    t.start = r.state;
    t.start_at = trainer::resume_position(r.state, t.global_batch);  // restores the default generator
    if (w.rank == 0) {
      std::printf("resumed from %s at epoch %lld, step %lld", resume.c_str(), (long long)t.start_at.epoch + 1,
                  (long long)t.start_at.step);
      if (t.start_at.epoch_offset > 0) std::printf(", %lld samples into the epoch", (long long)t.start_at.epoch_offset);
      std::printf("\n");
    }
    return std::move(r.optimizer);
  };
  const trainer::StepComms comms(dist::comm_for(t.dev), dist::comm_for(Device::cpu()));
  t.step = std::make_unique<trainer::Step>(t.model, comms, step_options(o), restore);
  t.step->set_steps_done(t.start_at.step);
  start_ema(o, t, std::move(ema_state));  // the file's copy freed here: not "other" memory at plan()
  t.step->set_ema(t.ema.get());            // the Step updates it after every applied step
  make_loaders(o, t);
  plan_steps(o, t);
  t.memory.plan(*t.step, t.dev, data_bytes(t, 0), trainer::ranks_sharing(t.dev, w.local_rank, w.local_size));
  if (w.local_rank == 0 && !t.memory.warning().empty()) std::fprintf(stderr, "%s\n", t.memory.warning().c_str());
  if (o.memory_budget_mib > 0) check_budget(o, t);  // before the first step allocates the optimizer state
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  return t;
}

}  // namespace tandem::apps
