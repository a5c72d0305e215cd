// apps/train/options.cpp: train_imagenet's command line (CLI11), the checks between options, and
// the step's options in the library's terms.
#include "apps/train/options.h"

#include <CLI/CLI.hpp>

#include "apps/trainer/run/cli.h"  // defines: add_config_flags, parse (suggestions, --config, --dump-config)
#include "apps/trainer/run/run_flags.h"  // defines: add_batch_flags, add_run_flags, after_parse, check_run_options
#include "core/check.h"        // defines: TANDEM_CHECK

namespace tandem::apps {

namespace {

// The data and the model: where the images come from, their transforms, the network. Returns
// --num-classes (parse_options reads whether it was given).
CLI::Option* add_data_flags(CLI::App& app, TrainOptions& o) {
  auto* data = app.add_option("--data", o.data, "dataset folder with train/ and val/ (ImageNet layout)")
                   ->check(CLI::ExistingDirectory);
  auto* syn = app.add_flag("--synthetic", o.synthetic, "synthetic data, batch resident on the device (compute only)");
  data->excludes(syn);
  app.add_option("--synthetic-size", o.synthetic_size, "synthetic training samples per epoch")->capture_default_str();
  app.add_option("--synthetic-val-size", o.synthetic_val_size, "synthetic validation samples (0: none)")
      ->capture_default_str();
  auto* nc = app.add_option("--num-classes", o.num_classes,
                            "classes of the synthetic data (with --data: must match the class folders)")
                 ->capture_default_str();
  app.add_option("--model", o.model, "resnet18/34/50/101/152, vgg11..19[_bn], alexnet, resnet_tiny, small_cnn")
      ->capture_default_str();
  app.add_option("--image-size", o.image_size, "training crop size (pixels)")->capture_default_str();
  app.add_option("--crop-scale-min", o.crop_scale_min, "smallest training crop, as a fraction of the image area")
      ->check(CLI::Range(0.01, 1.0))->capture_default_str();
  app.add_option("--val-resize-size", o.val_resize_size, "validation: resize the shorter side to this, then "
                 "centre-crop --val-crop-size (default: --image-size x 256/224, e.g. 256 for 224)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--val-crop-size", o.val_crop_size, "validation: the centre crop the model sees (default: "
                 "--image-size)")->check(CLI::NonNegativeNumber);
  app.add_option("--interpolation", o.interpolation, "resampling of the train and val transforms: bilinear "
                 "(torchvision's default; half-pixel centres, no antialiasing)")
      ->check(CLI::IsMember({"bilinear"}))->capture_default_str();
  app.add_option("--workers", o.workers, "data loading threads per rank")->capture_default_str();
  app.add_flag("--strict", o.strict, "stop at the first corrupt or unreadable image (default: skip it with a warning)");
  return nc;
}

// The training itself: seed, device, length, the optimizer and its LR schedule.
void add_training_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--seed", o.seed, "seed of init, shuffling and augmentation")->capture_default_str();
  app.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  // 0 would silently mean "the default" (1 epoch): reject it instead.
  const CLI::Validator at_least_one(
      [](std::string& v) -> std::string {
        try {
          if (std::stoll(v) >= 1) return "";
        } catch (const std::exception&) {
        }
        return "must be at least 1, got " + v;
      },
      "INT>=1");
  auto* ep = app.add_option("--epochs", o.epochs, "epochs to train (default 1)")->check(at_least_one);
  auto* st = app.add_option("--steps", o.steps, "optimizer steps to train in total")->check(at_least_one);
  ep->excludes(st);
  trainer::add_batch_flags(app, o.batch, o.step.grad_accum_steps, "images", "");
  app.add_option("--run-epochs", o.run_epochs,
                 "stop after this many epochs in this run (the LR schedule still spans --epochs); resume later")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--run-steps", o.run_steps,
                 "stop after this many steps in this run, also inside an epoch (the LR schedule still spans "
                 "--epochs/--steps); resume later")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lr", o.lr, "peak learning rate, used as given on any number of ranks (see --lr-scaling)")
      ->capture_default_str();
  auto* scaling = app.add_option("--lr-scaling", o.lr_scaling,
                                 "none: --lr as given (torchvision, Hugging Face); linear: --lr x world size "
                                 "(Goyal et al.)")
                      ->check(CLI::IsMember({"none", "linear"}))->capture_default_str();
  app.add_flag("--no-lr-scaling", o.no_lr_scaling, "same as --lr-scaling none, the default (the old opt-out, kept)")
      ->excludes(scaling);
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay,--wd", o.wd, "weight decay (L2 for SGD, decoupled for AdamW/LAMB)")
      ->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "SGD: Nesterov momentum");
  app.add_option("--optimizer", o.optimizer, "sgd, adamw or lamb")
      ->check(CLI::IsMember({"sgd", "adamw", "lamb"}))->capture_default_str();
  app.add_option("--betas", o.betas, "AdamW/LAMB: beta1,beta2")->delimiter(',')->expected(2)->capture_default_str();
  app.add_option("--eps", o.eps, "AdamW/LAMB: denominator guard (default: AdamW 1e-8, LAMB 1e-6)")
      ->check(CLI::PositiveNumber);
  app.add_option("--clip-grad-norm,--clip", o.step.clip_grad_norm,
                 "clip the global gradient norm to this (0: off); under --amp the norm of the unscaled f32 master "
                 "gradients, under --zero summed over every rank's shard")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr-scheduler,--lr-schedule", o.lr_schedule,
                 "LR decay after the warmup: cosine (to 0 at the end), step (x --lr-gamma at each of "
                 "--lr-milestones), poly ((1 - progress)^--lr-power), linear (poly with power 1) or constant")
      ->check(CLI::IsMember({"step", "cosine", "poly", "linear", "constant"}))->capture_default_str();
  app.add_option("--lr-min", o.lr_min, "the LR that cosine, poly and linear decay to at the last step (torchvision's "
                 "--lr-min; not scaled by --lr-scaling)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr-power", o.lr_power, "poly schedule: exponent (1: linear decay, BERT)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr-milestones", o.lr_milestones, "step schedule: epochs where lr *= --lr-gamma")
      ->delimiter(',')->capture_default_str();
  app.add_option("--lr-gamma", o.lr_gamma, "step schedule: the LR factor at each milestone")->capture_default_str();
  app.add_option("--lr-warmup-epochs,--warmup-epochs", o.warmup_epochs,
                 "linear warmup from --lr / world size (from 0 on one rank) over these epochs (default: 1 epoch, at "
                 "most a fifth of the run, when there is more than one rank; else none)");
  app.add_option("--lr-warmup-steps,--warmup-steps", o.warmup_steps,
                 "warmup length in steps (overrides --lr-warmup-epochs)");
  app.add_option("--label-smoothing", o.label_smoothing,
                 "cross-entropy label smoothing (torchvision's newer recipes: 0.1)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
}

// How the ranks share the work (buckets, strategy, precision, ZeRO, TP, the memory budget), then the
// flags both trainers share (apps/trainer/run/run_flags.h).
void add_parallel_flags(CLI::App& app, TrainOptions& o) {
  app.add_flag("--no-bucketing", o.no_bucketing, "one all-reduce per parameter");
  app.add_option("--strategy", o.strategy, "ddp: all-reduce during backward; ps: synchronous parameter server")
      ->check(CLI::IsMember({"ddp", "ps"}))->capture_default_str();
  app.add_option("--ps-servers", o.step.ps_servers, "ps: servers, colocated on ranks 0..K-1")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--amp", o.amp, "mixed precision: 16-bit compute, f32 master weights (fp16: dynamic loss scaling); "
                 "with --zero 1|2|3 each rank keeps the masters of its shard only")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stage: 0 (DDP), 1 (shard optimizer state, and the f32 masters under --amp), "
                 "2 (and gradients), 3 (and parameters: each block gathered around its forward and backward)")
      ->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--tp", o.tp, "tensor parallelism: train_encoder's (the CNNs here have no tensor-parallel layers); "
                               "only 1 is accepted")->capture_default_str();
  app.add_option("--memory-budget-mib", o.memory_budget_mib,
                 "refuse at start-up (exit 2) a run whose memory ledger predicts more than this many MiB of model "
                 "state and transient gradient buffers per rank (0: no budget)")
      ->check(CLI::NonNegativeNumber);
  trainer::add_run_flags(app, o,
                         {"write checkpoint_epoch<N>.safetensors here (mid-epoch: checkpoint_epoch<N>_step<S>; "
                          "epochs count from 1)",
                          "also write a checkpoint after every N-th step, inside epochs (0: at epoch ends only)",
                          "a state dict with torchvision's names: safetensors (safetensors.torch.save_file(model."
                          "state_dict(), FILE)) or a torch.save .pth/.pt (torchvision's downloads; read without "
                          "running its pickle)",
                          "'fc.*' to fine-tune with another --num-classes",
                          "SyncBatchNorm: BatchNorm statistics over every rank's batch (N ranks x batch B normalise as "
                          "one rank x N*B); costs two small all-reduces per BN layer"});
}

// What the run does besides training (validation, benchmarks, --describe, --evaluate) and the GPU
// kernels' settings.
void add_run_and_gpu_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--val-every", o.val_every, "epochs between validations (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--bench-warmup", o.bench_warmup,
                 "steps excluded from steady-state images/s (default: min(10, steps/4))");
  app.add_flag("--describe", o.describe,
               "print the model (layers, parameter count) and the effective settings, then exit (no data needed)");
  app.add_flag("--evaluate", o.evaluate, "print validation top-1/top-5 and loss of the --resume checkpoint (or of --weights), then exit");
  auto* bn_impl = app.add_option("--bn-impl", o.bn_impl,
                                 "GPU BatchNorm in training: cudnn (cuDNN's NHWC batch norm, with the ResNet block tail "
                                 "fused as BN+add+ReLU) or tandem (tandem's own kernels: the parity reference)")
                      ->check(CLI::IsMember({"cudnn", "tandem"}))->capture_default_str();
  // The first H100 session's spelling (apps/results/2026-11-22-h100/call13_runs.log), kept so its
  // commands still run; cuDNN is now the default, so it changes nothing.
  app.add_flag_callback("--cudnn-bn", [&o] { o.bn_impl = "cudnn"; }, "same as --bn-impl cudnn (the default)")
      ->excludes(bn_impl);
  app.add_option("--conv-bias-fusion", o.conv_bias_fusion,
                 "GPU conv with a bias (VGG, AlexNet): on (conv + bias add as one cuDNN graph where an engine takes "
                 "it, else the plain conv + add) or off (always the plain conv + add)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--conv-bn-fusion", o.conv_bn_fusion,
                 "ResNet conv -> BN -> ReLU: on (BN statistics from the conv's cuDNN epilogue, bn_finalize as a "
                 "graph; same values and gradients) or off (separate BN, the default until measured)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_flag("--deterministic", o.step.backend.deterministic,
               "bitwise-reproducible GPU runs: cuDNN engines marked non-deterministic are not used (slower)");
  app.add_flag("--cuda-graph", o.step.cuda_graph,
               "capture a training step as a CUDA graph and replay it (GPU with NCCL, --on-nonfinite off)");
}

}  // namespace

int parse_options(int argc, char** argv, TrainOptions& o, bool print) {
  CLI::App app{"train_imagenet: data-parallel ImageNet-style training (launch with mpiexec -n N)"};
  CLI::Option* nc = add_data_flags(app, o);
  add_training_flags(app, o);
  add_parallel_flags(app, o);
  add_run_and_gpu_flags(app, o);
  trainer::add_config_flags(app, o.dump_config, "train_imagenet");
  if (int rc = trainer::parse(app, argc, argv, print, "train_imagenet", o.dump_config, o.effective_config); rc >= 0)
    return rc;
  o.num_classes_set = nc->count() > 0;
  o.model_set = app.count("--model") > 0, o.image_size_set = app.count("--image-size") > 0;
  trainer::after_parse(app, o);
  if (o.no_lr_scaling) o.lr_scaling = "none";
  return -1;
}

void validate(TrainOptions& o) {
  TANDEM_CHECK(o.synthetic || !o.data.empty() || o.describe, "no data: pass --data DIR (train/ and val/ inside, e.g. made by "
               "apps/make_dataset) or --synthetic for a compute-only benchmark");
  TANDEM_CHECK(o.betas.size() == 2 && o.betas[0] >= 0 && o.betas[0] < 1 && o.betas[1] >= 0 && o.betas[1] < 1,
               "--betas takes two values in [0, 1), e.g. --betas 0.9,0.999");
  TANDEM_CHECK(o.optimizer != "sgd" || (o.eps < 0 && o.betas[0] == 0.9 && o.betas[1] == 0.999),
               "--betas and --eps belong to AdamW and LAMB: pass --optimizer adamw or lamb, or drop them");
  TANDEM_CHECK(o.batch > 0, "--batch-size must be positive, got ", o.batch);
  TANDEM_CHECK(o.image_size >= 8, "--image-size ", o.image_size, " is too small (at least 8 pixels)");
  {
    const int crop = o.val_crop_size > 0 ? o.val_crop_size : o.image_size;
    TANDEM_CHECK(crop >= 8, "--val-crop-size ", crop, " is too small (at least 8 pixels)");
    TANDEM_CHECK(o.val_resize_size == 0 || o.val_resize_size >= crop, "--val-resize-size ", o.val_resize_size,
                 " is smaller than the centre crop (", crop, "): resize to at least the crop");
  }
  TANDEM_CHECK(o.workers >= 0, "--workers must be >= 0, got ", o.workers);
  TANDEM_CHECK(o.epochs >= 0 && o.steps >= 0, "--epochs and --steps must be positive");
  if (o.epochs == 0 && o.steps == 0) o.epochs = 1;
  TANDEM_CHECK(o.lr > 0, "--lr must be positive, got ", o.lr);
  TANDEM_CHECK(o.lr_min < o.lr, "--lr-min ", o.lr_min, " must be below --lr ", o.lr, ": it is where the decay ends");
  TANDEM_CHECK(o.num_classes >= 2, "--num-classes must be at least 2");
  TANDEM_CHECK(!o.evaluate || !o.resume.empty() || !o.weights.empty(), "--evaluate needs --resume CHECKPOINT (or auto "
               "with --checkpoint-dir) or --weights FILE: the weights to evaluate");
  // --device is this trainer's: the library learns the device only when the world exists.
  TANDEM_CHECK(!o.step.cuda_graph || o.device != "cpu", "--cuda-graph captures GPU work, and --device cpu has none: drop "
               "--cuda-graph or use --device cuda");
  // Two flags that spell one library option (StepOptions::strategy): ps or a ZeRO stage, not both.
  TANDEM_CHECK(o.strategy != "ps" || o.zero == 0, "--strategy ps keeps whole partitions on its servers; ZeRO "
               "shards DDP's state instead: use one of --zero or --strategy ps");
  TANDEM_CHECK(o.tp == 1, "--tp ", o.tp, ": tensor parallelism splits a transformer's attention and FFN matrices "
               "(train_encoder --tp), and this trainer's CNNs have no tensor-parallel layers. To fit a model that "
               "does not fit one rank, shard it with --zero 3 instead");
  // Every combination of the step's own options: the library's one refusal function.
  const trainer::StepOptions step = step_options(o);
  trainer::check(step);
  trainer::check_run_options(o, step);
  TANDEM_CHECK(!o.evaluate || o.weights.empty() || o.resume.empty(), "--evaluate takes the weights of --weights "
               "FILE or of the --resume checkpoint: pass one of them");
}

namespace {

// The words for the library's options in this trainer's messages (apps/trainer/step/option_names.h).
std::string flag_name(const std::string& option, const std::string& value) {
  if (option == "strategy") {
    if (value == "zero1" || value == "zero2" || value == "zero3") return std::string("--zero ") + value.back();
    return value.empty() ? "--strategy" : "--strategy " + value;
  }
  // This trainer's own flags; the rest are both trainers' (run_flags.h), or the library's words.
  if (option == "cuda_graph") return value.empty() ? "--cuda-graph" : "--cuda-graph " + value;
  if (option == "ps_servers") return value.empty() ? "--ps-servers" : "--ps-servers " + value;
  const std::string shared = trainer::shared_flag_name(option, value);
  return shared.empty() ? trainer::library_option_name(option, value) : shared;
}

}  // namespace

trainer::StepOptions step_options(const TrainOptions& o) {
  trainer::StepOptions s = o.step;  // what the flags wrote directly (run_flags.h)
  s.strategy = trainer::strategy_from_flags(o.strategy, o.zero);
  s.overlap = !o.no_overlap, s.bucketed = !o.no_bucketing;
  // --optimizer with its options; the lr is overwritten at every step by the schedule. momentum and
  // nesterov are SGD's, betas and eps AdamW's and LAMB's. One weight decay for every parameter
  // (torchvision's default recipe: no no-decay group).
  s.optimizer = o.optimizer;
  s.optimizer_options = trainer::optimizer_from_flags(o.optimizer, o.lr, o.wd, o.momentum, o.nesterov, o.betas, o.eps);
  s.precision = trainer::precision_from_name(o.amp);
  s.on_nonfinite = trainer::on_nonfinite_from_name(o.on_nonfinite);
  s.checkpoint = !o.checkpoint_dir.empty();
  s.backend.cudnn_batchnorm = o.bn_impl == "cudnn";    // --bn-impl: on the CPU neither path exists
  s.backend.conv_bias_fusion = o.conv_bias_fusion == "on";
  s.backend.conv_bn_fusion = o.conv_bn_fusion == "on";
  s.names = flag_name;
  return s;
}

}  // namespace tandem::apps
