// apps/train/options.h: train_imagenet's settings and command line (CLI11).
//
// One struct, every field with its default and reason. parse_options() fills it from argv;
// step_options() turns the step's part (strategy, buckets, optimizer, clipping, precision, CUDA
// graph, non-finite policy, backend settings) into the library's StepOptions (apps/trainer/
// step_options.h), whose messages then name these flags; validate() rejects what cannot work, with
// a sentence saying what to change: the data and schedule flags here, the step's combinations by
// the library's one refusal function (apps/train/options.cpp).
// The flag words are the ones train_encoder uses too, after torchvision's references/
// classification/train.py and Hugging Face's TrainingArguments where those agree (--batch-size,
// --weight-decay, --clip-grad-norm, --betas, --eps, --lr-scheduler, --lr-warmup-epochs/-steps,
// --grad-accum-steps, --keep-checkpoints); the older spellings (--batch, --wd, --lr-schedule,
// --warmup-epochs, --warmup-steps) stay as aliases. --config FILE, --dump-config and the suggestion
// for a mistyped flag come from apps/trainer/run/cli.h.
// The LR and the world size (one rule in both trainers, printed at start-up): --lr is used as given,
// as torchvision's and Hugging Face's scripts do; --lr-scaling linear multiplies it by the world
// size (Goyal et al.). With more than one rank the default warmup (one epoch) starts from --lr /
// world size either way.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/trainer/run/run_flags.h"     // defines: RunOptions
#include "apps/trainer/step/step_options.h"  // defines: StepOptions

namespace tandem::apps {

// The shared options (checkpoints, weights, communication, outputs) are RunOptions's
// (apps/trainer/run/run_flags.h); these are train_imagenet's own.
// The Step's options that a flag writes directly are RunOptions::step's, with the library's defaults
// (apps/trainer/step/step_options.h): --grad-accum-steps, --clip-grad-norm, --cuda-graph, --ps-servers,
// --deterministic, --sync-bn, --bucket-mb, --first-bucket-mb, --compress. What stays here is this
// trainer's recipe (SGD's lr, momentum, weight decay) and the names step_options() maps to enums.
struct TrainOptions : trainer::RunOptions {
  // data and model
  std::string data;                 // ImageNet layout: <data>/train/<class>/*, <data>/val/<class>/*
  bool synthetic = false;           // decode-free data; the training batch stays resident on the device
  int64_t synthetic_size = 1281167; // synthetic training samples per epoch (ImageNet-1k's train size)
  int64_t synthetic_val_size = 10000;  // synthetic validation samples (0: no validation)
  int num_classes = 1000;           // synthetic only; image folders count their class folders
  bool num_classes_set = false;     // --num-classes was given: with --data it must match the folders
  std::string model = "resnet50";   // layers/models/models.h create_model names
  int image_size = 224;             // torchvision's training crop
  double crop_scale_min = 0.08;     // RandomResizedCrop's smallest area fraction (torchvision); small
                                    // generated datasets learn faster with milder crops (e.g. 0.35)
  int workers = 4;                  // loader decoding threads per rank
  bool strict = false;              // a corrupt/unreadable image is fatal instead of skipped with a warning
  uint64_t seed = 0;                // model init, shuffling and augmentation
  std::string device = "auto";      // auto: the GPU when one is visible, else the CPU
  // length and batch
  int64_t epochs = 0;               // exactly one of epochs and steps is set (defaults to 1 epoch)
  int64_t steps = 0;                // optimizer steps in total (across resumes)
  int64_t batch = 64;               // per rank and micro-batch (--batch-size; --batch and -b are aliases)
  int64_t run_epochs = 0;           // >0: stop this invocation after that many epochs (the schedule
                                    // still spans --epochs/--steps); for time-limited jobs + --resume
  int64_t run_steps = 0;            // >0: stop this invocation after that many steps, also inside an
                                    // epoch (a mid-epoch checkpoint); train_encoder's flag
  // optimizer and schedule (torchvision's ResNet recipe for batch 256: lr 0.1, momentum 0.9, wd 1e-4)
  double lr = 0.1;                  // the peak LR as used (torchvision's rule: not scaled by the world size)
  std::string lr_scaling = "none";  // none | linear: --lr x world size (Goyal et al.'s rule)
  bool no_lr_scaling = false;       // --no-lr-scaling: the old opt-out, now the default (kept so old commands run)
  double momentum = 0.9;            // SGD momentum (torchvision's ResNet recipe)
  double wd = 1e-4;                 // --weight-decay (--wd), on every parameter (torchvision's default recipe)
  bool nesterov = false;            // SGD with Nesterov momentum
  std::string optimizer = "sgd";    // sgd | adamw | lamb (optim/optimizer.h make_optimizer)
  std::vector<double> betas{0.9, 0.999};  // AdamW/LAMB moment decay rates (torch.optim.AdamW's)
  double eps = -1;                  // AdamW/LAMB denominator guard; -1: the optimizer's default
                                    // (AdamW 1e-8, LAMB 1e-6)
  std::string lr_schedule = "cosine";  // --lr-scheduler: step | cosine | poly | linear (poly, power 1) | constant
  double lr_power = 1.0;            // poly: the exponent of (1 - progress); 1 = BERT's linear decay
  int val_resize_size = 0;          // val: the shorter side before the centre crop; 0: image size x 256/224
  int val_crop_size = 0;            // val: the centre crop (the model's input); 0: --image-size
  std::string interpolation = "bilinear";  // the resampling of both transforms (bilinear only)
  double lr_min = 0.0;              // cosine, poly, linear: the LR they decay to (torchvision's --lr-min)
  std::vector<double> lr_milestones{30, 60, 80};  // step: epochs where lr *= lr_gamma (torchvision)
  double lr_gamma = 0.1;
  double warmup_epochs = -1;        // -1: 1 epoch (at most 1/5 of the run) when world size > 1, else none
  int64_t warmup_steps = -1;        // overrides warmup_epochs when >= 0
  double label_smoothing = 0.0;     // torchvision's newer recipes use 0.1
  // communication (the rest: RunOptions)
  bool no_bucketing = false;        // one all-reduce per parameter (baseline)
  std::string strategy = "ddp";     // ddp | ps: all-reduce, or the parameter server baseline (dist/extras/parameter_server.h)
  // precision and sharding: only the implemented values are accepted
  std::string amp = "off";
  int zero = 0;                     // 0: DDP; 1: shard optimizer state; 2: also gradients; 3: also parameters (dist/zero.h)
  // tensor parallelism (refused: train_encoder's) and the memory budget (issue 22)
  int tp = 1;                       // accepted only as 1: the CNNs have no tensor-parallel layers
  double memory_budget_mib = 0;     // > 0: refuse at start-up a run whose predicted bytes per rank exceed it
  // output
  int val_every = 1;                // epochs between validations (0: only after the last step)
  int bench_warmup = -1;            // steps left out of steady-state images/s (-1: min(10, steps/4),
                                    // with --cuda-graph at least the eager and capturing steps)
  bool describe = false;            // print the model and settings, then exit (needs no data)
  std::string bn_impl = "cudnn";   // GPU training-mode BatchNorm: cudnn (cuDNN's NHWC kernels, and the
                                    // fused BN+add+ReLU ResNet block tail) | tandem (tandem's own kernels,
                                    // the parity reference); BackendConfig::cudnn_batchnorm. The CPU ignores it
  std::string conv_bias_fusion = "on";  // GPU conv + bias as one cuDNN graph (on) or conv then a broadcast
                                        // add (off); BackendConfig::conv_bias_fusion. VGG/AlexNet only (ResNet's
                                        // convs have no bias). A switch because it is not yet timed on a GPU
  std::string conv_bn_fusion = "off";  // ResNet conv -> BN -> ReLU with the BN statistics from the conv's
                                       // cuDNN epilogue and bn_finalize as a graph (on) or as today (off);
                                       // BackendConfig::conv_bn_fusion. Off: never run on a GPU, unmeasured
  bool model_set = false;           // --model was given: --evaluate checks it against the checkpoint's
  bool image_size_set = false;      // --image-size was given: likewise
};

// Fills `o` from the command line. Returns an exit code when the program should stop (--help or a
// parse error, already printed on rank 0), -1 to go on. `print`: this process prints (rank 0).
int parse_options(int argc, char** argv, TrainOptions& o, bool print);

// Throws tandem::Error for settings that parse but cannot work together (and sets --epochs 1 when
// neither --epochs nor --steps was given). --epochs 0 and --steps 0 are parse errors.
void validate(TrainOptions& o);

// The step's options as the library's StepOptions, its messages naming this trainer's flags
// (--strategy and --zero both map to StepOptions::strategy; validate() refuses them together).
trainer::StepOptions step_options(const TrainOptions& o);

}  // namespace tandem::apps
