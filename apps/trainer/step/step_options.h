// apps/trainer/step/step_options.h: what a training step is built from - one struct - and the one
// place that says which combinations of it cannot work, and why.
// In full: apps/trainer/step/README.md ("step_options.h in detail").
#pragma once
#include <optional>
#include <string>

#include "apps/trainer/step/nonfinite.h"     // defines: OnNonfinite
#include "apps/trainer/step/option_names.h"  // defines: OptionNames
#include "apps/trainer/step/param_groups.h"  // defines: NoDecayRule
#include "core/backend.h"               // defines: BackendConfig
#include "core/device.h"                // defines: Device
#include "dist/bucketing.h"             // defines: BucketingOptions (the bucket sizes' defaults)
#include "dist/ddp.h"                   // defines: DdpOptions
#include "optim/optimizer.h"            // defines: OptimizerOptions

namespace tandem::trainer {

// How the ranks combine gradients and where the optimizer runs.
enum class Strategy {
  Ddp,              // every rank all-reduces the gradients and updates everything (dist/ddp.h)
  Zero1,            // all-reduce; each rank updates its shard and keeps its optimizer state (dist/zero.h)
  Zero2,            // the gradients reduce-scattered into the shards during backward; then as zero1
  Zero3,            // the parameters sharded too, each unit gathered around its forward and backward (dist/zero3.h)
  ParameterServer,  // push to servers, update there, pull (dist/parameter_server.h)
};
Strategy strategy_from_name(const std::string& name);  // "ddp", "zero1", "zero2", "zero3", "ps"
const char* strategy_name(Strategy s);
// The ZeRO stage of a strategy: 1, 2, 3, or 0 (ddp, ps).
inline int zero_stage(Strategy s) {
  return s == Strategy::Zero1 ? 1 : s == Strategy::Zero2 ? 2 : s == Strategy::Zero3 ? 3 : 0;
}
inline bool is_zero(Strategy s) { return zero_stage(s) > 0; }

// The dtype the model computes in; 16-bit runs keep f32 master weights (amp.h).
enum class Precision { F32, BF16, F16 };
Precision precision_from_name(const std::string& name);  // "off", "bf16", "fp16"
const char* precision_name(Precision p);                 // "off" for F32, as the trainers' --amp spells it

// Bytes as the options and flags spell bucket sizes: MiB.
constexpr double bytes_to_mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

struct StepOptions {
  // How gradients are combined (strategy) and DDP's buckets.
  Strategy strategy = Strategy::Ddp;
  int ps_servers = 1;            // ParameterServer: servers colocated on ranks 0..K-1 (1 <= K <= ranks)
  // The bucket sizes' defaults are dist/bucketing.h's (1 MiB first, then PyTorch DDP's bucket_cap_mb).
  double first_bucket_mb = bytes_to_mib(dist::BucketingOptions{}.first_bucket_bytes);
  double bucket_mb = bytes_to_mib(dist::BucketingOptions{}.bucket_bytes);
  bool overlap = true;           // false: all-reduces start after backward ends (a baseline)
  bool bucketed = true;          // false: one all-reduce per parameter (a baseline)
  std::string compress = "none"; // none | bf16 | fp16: the gradients' dtype on the wire
  // The optimizer (optim/optimizer.h): "sgd", "adamw" or "lamb", with its options (momentum,
  // betas, eps, weight decay; lr is the first step's until the trainer's set_lr). Parameters the
  // rule names train without weight decay (param_groups.h; null: every parameter decays).
  std::string optimizer = "sgd";
  optim::OptimizerOptions optimizer_options;
  NoDecayRule no_decay;
  double clip_grad_norm = 0;     // > 0: clip the global gradient L2 norm to this first (0: off)
  Precision precision = Precision::F32;
  // Micro-batches per optimizer step: the trainer's forward-loss function runs this many times per
  // step (run()), each loss divided by it, only the last backward synchronised (as HF Trainer's
  // gradient_accumulation_steps). 1: none.
  int grad_accum_steps = 1;
  // Capture the step as a CUDA graph after GraphCapture::kEagerSteps eager steps, then replay it
  // (graph_capture.h). The trainer's forward-loss function must then read static inputs it owns.
  // Implies `capturable`.
  bool cuda_graph = false;
  // The update in its capturable form (step.h, "The capturable update"): the loss scale, the
  // found-inf flag (all-reduced over the Step's communicator), the clipping norm and the skip
  // decision stay on the device. Off (the default): the host form, which reads the flag and the
  // norm. Both give the same parameters, bit for bit where the kernels are deterministic
  // (tests/mpi_trainer_capturable.cpp). On without cuda_graph, the step runs eagerly and reads the
  // results back after the update for StepResult (a device sync, as the host form's).
  bool capturable = false;
  OnNonfinite on_nonfinite = OnNonfinite::Stop;  // a non-finite loss on any rank (nonfinite.h)
  bool checkpoint = false;       // the trainer will save state(): refused where it cannot be assembled
  // Every BatchNorm2d becomes a dist::SyncBatchNorm before DDP wraps the model (DdpOptions::
  // sync_batchnorm): training-mode statistics over every rank's batch, as torch's
  // SyncBatchNorm.convert_sync_batchnorm. Any strategy and precision; a model without BN is unchanged.
  bool sync_batchnorm = false;
  // Tensor parallelism: the TP group's size T (1: none). T > 1: the Step's communicator is the DP
  // one of a dist::tp::Grid and the Step is given the TP group and layout (step.h, TpParts).
  int tp = 1;
  BackendConfig backend;         // applied for the Step's lifetime (core/backend.h)
  OptionNames names;             // how messages name these options (empty: the library's names)
};

// Why `o` cannot work, in words that name options through o.names; nullopt when it can.
std::optional<std::string> refusal(const StepOptions& o);
// The same for where the step runs: `device` (the ranks' device) and `comm_backend` (the gradient
// collectives' backend, dist::Communicator::backend(): "nccl", "mpi", ...), and the environment
// (TANDEM_FAULT, TANDEM_SYNC_CHECK act on the host in the middle of a step).
std::optional<std::string> refusal_on(const StepOptions& o, Device device, const std::string& comm_backend);
// What a TP size T cannot split, in the trainer's words (o.names): a T that does not divide the
// world size, or the model's attention heads, hidden size, FFN width (vocabulary: any, vocab_shard
// balances it); nullopt when T = 1 or it divides them all. Pass 0 for a size the model lacks.
std::optional<std::string> tp_refusal(const StepOptions& o, int world, int64_t heads, int64_t hidden,
                                      int64_t intermediate);
// Throw tandem::Error with the refusal's sentence.
void check(const StepOptions& o);
void check_on(const StepOptions& o, Device device, const std::string& comm_backend);

// DDP's options for this step: the buckets, overlap, compression, and ZeRO-2/3's reduce-scatter.
dist::DdpOptions ddp_options(const StepOptions& o);

}  // namespace tandem::trainer
