// apps/train/setup.cpp: builds a Training (see setup.h for why the order is fixed).
#include "apps/train/setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "apps/train/checkpointing.h"     // defines: restore_checkpoint
#include "apps/trainer/graph_capture.h"   // defines: GraphCapture::kEagerSteps
#include "core/device.h"                  // defines: require_cuda
#include "core/profile.h"                 // defines: enable_trace
#include "core/random.h"               // defines: manual_seed
#include "data/image_folder.h"         // defines: ImageFolder (train/ and val/ splits)
#include "data/synthetic.h"            // defines: SyntheticDataset
#include "layers/models/models.h"      // defines: create_model

namespace tandem::apps {

bool env_rank0() {
  for (const char* v : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* r = std::getenv(v)) return std::string(r) == "0";
  return true;
}

const dist::World& init_world(const TrainOptions& o) {
  dist::InitOptions io;
  io.use_gpu = o.device != "cpu";
  // Before MPI: the same clear error on every rank (CUDA's own error and driver/runtime versions).
  if (o.device == "cuda") require_cuda("train_imagenet --device cuda");
  const dist::World& w = dist::init(io);
  TANDEM_CHECK(o.device != "cuda" || w.device.is_cuda(), "--device cuda but dist::init chose ", w.device.str(),
               ": use --device cpu");
  trainer::check_on(step_options(o), w.device, dist::comm_for(w.device).backend());
  return w;
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
  data::ImageFolderOptions tr, va;
  tr.transform.size = va.transform.size = o.image_size;
  tr.transform.scale_min = o.crop_scale_min;
  va.train = false;
  namespace fs = std::filesystem;
  const std::string train_dir = (fs::path(o.data) / "train").string();
  d.train = std::make_shared<data::ImageFolder>(train_dir, tr);
  TANDEM_CHECK(!o.num_classes_set || o.num_classes == d.train->num_classes(), "--num-classes ", o.num_classes,
               " does not match the ", d.train->num_classes(), " class folders in ", train_dir,
               ": drop --num-classes (with --data the class folders set it)");
  if (fs::is_directory(fs::path(o.data) / "val"))
    d.val = std::make_shared<data::ImageFolder>((fs::path(o.data) / "val").string(), va);
  else if (env_rank0())
    std::printf("note: %s has no val/ folder, so there will be no validation\n", o.data.c_str());
  return d;
}

ModulePtr make_model(const TrainOptions& o, int classes, const std::string& resume) {
  models::ModelOptions mo;
  mo.init = resume.empty();  // a checkpoint overwrites every tensor: skip drawing the init
  return models::create_model(o.model, classes, o.seed, mo);
}

optim::LrScheduleOptions make_schedule(const TrainOptions& o, int world, int64_t spe, int64_t total) {
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
  s.power = o.lr_power;
  const bool decays = s.decay == optim::LrDecay::Cosine || s.decay == optim::LrDecay::Poly;
  TANDEM_CHECK(!decays || total > s.warmup_steps, "the ", o.lr_schedule, " schedule needs more steps (",
               total, ") than warmup steps (", s.warmup_steps, "): shorten --warmup-epochs/--warmup-steps");
  return s;
}

namespace {
// The training loader's settings; the validation loader starts from them.
data::LoaderOptions train_loader_options(const TrainOptions& o, const dist::World& w) {
  data::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.num_workers = o.workers;
  lo.seed = o.seed;
  lo.rank = w.rank;
  lo.world_size = w.size;
  lo.device = w.device;
  lo.resident = o.synthetic;
  lo.strict = o.strict;
  return lo;
}
}  // namespace

std::unique_ptr<data::Loader> make_val_loader(const TrainOptions& o, const dist::World& w,
                                              std::shared_ptr<const data::Dataset> val) {
  data::LoaderOptions vo = train_loader_options(o, w);
  vo.shuffle = false, vo.pad_shards = false, vo.drop_last = false, vo.resident = false;
  return std::make_unique<data::Loader>(std::move(val), vo);
}

namespace {

// Shuffled, sharded training batches; validation in file order, every sample exactly once.
void make_loaders(const TrainOptions& o, Training& t) {
  t.train = std::make_unique<data::Loader>(t.data.train, train_loader_options(o, *t.world));
  if (t.data.val) t.val = make_val_loader(o, *t.world, t.data.val);
}

// Steps per epoch, the run's length and its LR schedule.
void plan_steps(const TrainOptions& o, Training& t) {
  const int64_t spe = t.steps_per_epoch = t.train->batches_per_epoch();
  TANDEM_CHECK(spe > 0, "the training set (", t.data.train->size(), " samples) is smaller than one global batch (",
               o.batch, " x ", t.world->size, " ranks): lower --batch or use more data");
  const int64_t total = t.total_steps = o.steps > 0 ? o.steps : o.epochs * spe;
  t.epochs = (total + spe - 1) / spe;
  t.end_epoch = o.run_epochs > 0 ? std::min(t.epochs, t.start.epoch + o.run_epochs) : t.epochs;
  t.sched = make_schedule(o, t.world->size, spe, total);
  if (auto it = t.start.extra.find("total_steps");
      t.world->rank == 0 && it != t.start.extra.end() && it->second != std::to_string(total))
    std::printf("warning: the checkpoint's run was %s steps long, this one is %lld: the LR schedule changes, so "
                "the result will differ from an uninterrupted run (pass the same --epochs/--steps)\n",
                it->second.c_str(), (long long)total);
  const int64_t run_steps = std::max<int64_t>(total - t.start.step, 0);
  int64_t warmup = std::min<int64_t>(10, run_steps / 4);
  // --cuda-graph: the default window also leaves out the eager steps and the capturing one, whose
  // time includes capture and instantiation, where the run has steps after them to measure.
  constexpr int64_t kGraphWarmup = trainer::GraphCapture::kEagerSteps + 1;
  if (o.cuda_graph && run_steps > kGraphWarmup) warmup = std::max(warmup, kGraphWarmup);
  t.bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : warmup;
}

}  // namespace

int64_t data_bytes(const Training& t, const data::Batch* in_hand) {
  int64_t held = t.train->bytes_held() + (t.val ? t.val->bytes_held() : 0);
  held += data::batch_bytes(t.graph_batch.images, t.graph_batch.labels);
  if (in_hand && !t.train->options().resident) held += data::batch_bytes(in_hand->images, in_hand->labels);
  return held;
}

Training set_up(const TrainOptions& o, const dist::World& w, Datasets ds, ModulePtr model, const std::string& resume) {
  Training t;
  t.world = &w;
  t.dev = w.device;
  t.data = std::move(ds);
  t.classes = t.data.train->num_classes();
  t.global_batch = o.batch * w.size;
  t.resumed_from = resume;
  t.model = std::move(model);
  t.model->to(t.dev);
  manual_seed(o.seed);
  // The checkpoint goes in after --amp's cast and before DDP's broadcast; the Step calls back here.
  auto restore = [&](Module& m) {
    if (resume.empty()) return NamedTensors{};
    Restored r = restore_checkpoint(resume, m, o, w);
    t.start = r.state;
    return std::move(r.optimizer);
  };
  t.step = std::make_unique<trainer::Step>(t.model, dist::comm_for(t.dev), step_options(o), restore);
  t.step->set_steps_done(t.start.step);
  make_loaders(o, t);
  plan_steps(o, t);
  t.memory.plan(*t.step, t.dev, data_bytes(t, nullptr));
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  return t;
}

}  // namespace tandem::apps
