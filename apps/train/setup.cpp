// apps/train/setup.cpp: builds a Training (see setup.h for why the order is fixed).
#include "apps/train/setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "apps/train/checkpointing.h"  // defines: restore_checkpoint
#include "apps/train/ddp_options.h"    // defines: ddp_options
#include "apps/train/memory.h"         // defines: plan_memory
#include "core/device.h"               // defines: require_cuda, built_with_cuda
#include "core/ops/batchnorm.h"        // defines: set_batchnorm_cudnn
#include "core/ops/conv.h"             // defines: set_deterministic
#include "core/profile.h"              // defines: enable_trace
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
  if (o.cuda_graph) check_cuda_graph(w);
  return w;
}

void check_cuda_graph(const dist::World& w) {
  TANDEM_CHECK(w.device.is_cuda(), "--cuda-graph needs a GPU, and this run is on the CPU (",
               built_with_cuda() ? "no usable GPU is visible" : "this build has no CUDA backend",
               "): drop --cuda-graph");
  const std::string backend = dist::comm_for(w.device).backend();
  TANDEM_CHECK(backend == "nccl", "--cuda-graph: the gradient all-reduces go over ", backend,
               " (host memory, driven by a CPU thread), which a CUDA graph cannot capture. Give every rank its own "
               "GPU and leave TANDEM_HOST_STAGING unset so that NCCL carries them, or drop --cuda-graph");
  for (const char* var : {"TANDEM_FAULT", "TANDEM_SYNC_CHECK"}) {
    const char* v = std::getenv(var);
    TANDEM_CHECK(!v || !*v || std::string(v) == "0", "--cuda-graph with ", var, "=", v ? v : "",
                 ": its hooks act on the host in the middle of the step (a fault drill, a sync after every op), "
                 "which a replayed graph cannot do. Unset ", var, " or drop --cuda-graph");
  }
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

std::unique_ptr<dist::DistributedDataParallel> make_ddp(const TrainOptions& o, ModulePtr model, Device dev) {
  DdpFlags f;
  f.first_bucket_mb = o.first_bucket_mb, f.bucket_mb = o.bucket_mb;
  f.overlap = !o.no_overlap, f.bucketed = !o.no_bucketing;
  f.compress = o.compress, f.zero = o.zero;
  return std::make_unique<dist::DistributedDataParallel>(std::move(model), dist::comm_for(dev), ddp_options(f));
}

// --optimizer over the whole parameters (DDP), this rank's ZeRO segments, or the f32 masters (AMP:
// of the whole parameters, or of the ZeRO shard). The lr is overwritten at every step by the
// schedule; momentum/nesterov are SGD's, betas/eps AdamW's and LAMB's.
std::unique_ptr<optim::Optimizer> make_opt(const TrainOptions& o, Training& t) {
  optim::OptimizerOptions oo;
  oo.lr = o.lr;
  oo.weight_decay = o.wd;
  if (o.optimizer == "sgd") {
    oo.momentum = o.momentum;
    oo.nesterov = o.nesterov;
  } else {
    oo.beta1 = o.betas[0], oo.beta2 = o.betas[1];
    if (o.eps > 0) oo.eps = o.eps;
  }
  if (t.zero) oo.norm_reduce = t.zero->sum_reduce();  // LAMB's per-parameter norms span every rank's shard
  if (t.amp) return make_amp_optimizer(*t.amp, o.optimizer, oo);  // apps/train/amp.h
  if (!t.zero) return optim::make_optimizer(o.optimizer, t.model->named_parameters(), oo);
  return optim::make_optimizer(o.optimizer, t.zero->segments(), t.zero->num_params(), oo);
}

// --strategy ps: the reducer stops averaging (permanently "no_sync": backward only accumulates into
// .grad), and the parameter server's servers run the same SGD on their partitions instead.
std::unique_ptr<dist::ParameterServer> make_ps(const TrainOptions& o, dist::DistributedDataParallel& ddp) {
  ddp.reducer().set_sync(false);
  dist::PsOptions po;
  po.servers = o.ps_servers;
  po.optimizer = "sgd";
  po.optimizer_options.lr = o.lr;
  po.optimizer_options.momentum = o.momentum;
  po.optimizer_options.weight_decay = o.wd;
  po.optimizer_options.nesterov = o.nesterov;
  optim::NamedTensors trainable;
  for (auto& [name, p] : ddp.module().named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  dist::Communicator& comm = dist::comm_for(trainable.front().second.device());
  return std::make_unique<dist::ParameterServer>(std::move(trainable), comm, po);
}

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
  constexpr int64_t kGraphWarmup = GraphStep::kEagerSteps + 1;
  if (o.cuda_graph && run_steps > kGraphWarmup) warmup = std::max(warmup, kGraphWarmup);
  t.bench_warmup = o.bench_warmup >= 0 ? o.bench_warmup : warmup;
}

}  // namespace

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
  t.amp = make_amp(o, *t.model);  // the cast: before the restore (an AMP checkpoint holds 16-bit weights) and DDP
  manual_seed(o.seed);
  ops::set_deterministic(o.deterministic);  // before the first conv builds its cuDNN plans
  ops::set_batchnorm_cudnn(o.bn_impl == "cudnn");  // --bn-impl: on the CPU neither path exists
  ops::set_conv_bias_fusion(o.conv_bias_fusion == "on");
  NamedTensors opt_state;
  if (!resume.empty()) {
    Restored r = restore_checkpoint(resume, *t.model, o, w);
    t.start = r.state;
    opt_state = std::move(r.optimizer);
  }
  t.ddp = make_ddp(o, t.model, t.dev);
  if (o.zero > 0) t.zero = std::make_unique<dist::Zero>(*t.ddp, o.zero);
  // The masters start from rank 0's broadcast 16-bit weights (of this rank's shard under ZeRO);
  // a checkpoint's f32 masters then replace them.
  if (t.amp) build_masters(*t.amp, *t.model, t.zero.get());
  if (!resume.empty()) take_amp_state(t.amp.get(), opt_state);
  t.opt = make_opt(o, t);
  if (o.strategy == "ps") t.ps = make_ps(o, *t.ddp);
  if (!opt_state.empty()) t.opt->load_state(opt_state);
  make_loaders(o, t);
  plan_steps(o, t);
  plan_memory(o, t);
  if (o.cuda_graph) t.graph = std::make_unique<GraphStep>();
  if (!o.trace.empty()) profile::enable_trace(profile::Level::Layer);
  return t;
}

}  // namespace tandem::apps
