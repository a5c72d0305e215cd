// apps/trainer/step.h: one training step - the object both trainers share.
//
// A Step is built from a model and one StepOptions (step_options.h) and owns everything between
// the trainer's loss and the updated weights: DDP (dist/ddp.h), ZeRO-1/2/3 (dist/zero.h) or the
// parameter server (dist/parameter_server.h); AMP's cast, f32 masters and loss scaler (amp.h); the
// optimizer with its parameter groups (param_groups.h); clipping; gradient accumulation; CUDA-graph
// capture (graph_capture.h); the non-finite policy (nonfinite.h); and the backend settings
// (core/backend.h, applied for the Step's lifetime). Every combination of them either works or is
// refused by the constructor, in one place (step_options.cpp), with the reason.
//
// Construction order is part of a run's determinism and is fixed here:
//   backend settings -> AMP cast of the model (an AMP checkpoint holds 16-bit weights) ->
//   restore(model): the trainer loads the checkpoint's weights (and its generator state) and
//   returns its optimizer entries -> DDP, which checks the ranks built the same model and
//   broadcasts rank 0's tensors -> ZeRO -> AMP's f32 masters from the broadcast weights (of this
//   rank's shard under ZeRO) -> the optimizer -> the parameter server -> load_state(entries):
//   the checkpoint's masters, loss scale and optimizer state (each rank its own range).
// The model must already be on its device, and the trainer seeds the default generator first.
//
// One step, in either form:
//   step.set_lr(lr);
//   StepResult r = step.run([&](int micro) { return loss_of(micro); });   // the usual form
// or by hand (not with cuda_graph):
//   step.zero_grad();  for each micro-batch: step.backward(loss_of(m));  StepResult r = step.update();
// where the trainer's loss function runs the model through step.forward(x) (image models: one
// input, cast to the 16-bit dtype under AMP) or step.forward_with(f) (any signature; f runs the
// module once). run() calls it grad_accum_steps times (micro = 0, 1, ...); under cuda_graph it is
// what the graph captures, so it must then read static inputs the trainer owns.
//   zero_grad  ZeRO: what the next backward accumulates into (zero.h); else DDP's bucket views, one
//              memset per bucket (the first accumulation then copies instead of adding).
//   backward   loss x loss scale (fp16) / grad_accum_steps; all but the last micro-batch under
//              DDP's no_sync, so only the last one communicates.
//   update     [the non-finite check of the loss, the gradients and the last update's weights,
//              agreed by all ranks in one all-reduce (nonfinite.h)] then one of: the parameter
//              server's push/update/pull; AMP's unscale, overflow agreement, [clip], step, copy
//              back [, ZeRO-1/2's all-gather]; or [clip,] step [, ZeRO-1/2's all-gather] (ZeRO-3
//              gathers each unit when it next runs). Skipped on every rank alike, or applied on
//              every rank.
// state() / load_state() hold what a checkpoint needs from the step beyond the model's weights:
// the optimizer state (unsharded, keyed "<param>.<state>", gathered from the shards under ZeRO),
// AMP's f32 masters ("amp.master.<param>") and loss scaler ("amp.scaler.*"), so a checkpoint
// resumes at any world size, strategy and precision. check_state_finite() checks that state, and
// the weights, before a trainer writes it (collective); finish() resolves the last update's weight
// check at the end of a run.
//
// The capturable update (StepOptions::capturable, implied by cuda_graph; optim/amp.h's "A captured
// step" is the recipe). The host form reads the found-inf flag (AMP) and the clipping norm on the
// host; this form keeps every decision on the device, so a CUDA graph can hold the whole update:
//   backward   fp16: the loss times the scaler's scale tensor (LossScaler in tensor mode on the
//              model's device, built instead of the host-mode one; bf16 keeps the scale at 1 and
//              multiplies by nothing, as the host form), then / grad_accum_steps;
//   update     AMP: amp_step_device's sequence over the two parameter groups (optim::amp_step_device
//              takes one Optimizer; ParamGroups holds two): unscale into the masters and set the
//              flag; all-reduce (sum) of the f32 [1] flag over the Step's communicator (NCCL: on
//              its stream, joined back by an event, so inside the graph) - every rank skips alike; the
//              GradClipper on the master gradients; each group's step(found_inf); the copy back
//              (skipped on the device likewise); the scaler's update on the device.
//              f32: the GradClipper, then the optimizers' step.
// Results: under cuda_graph, StepResult::applied stays true and grad_norm -1 - the decision is on
// the device; skipped_unreported() reads how many updates the device skipped (a sync: at log time),
// and loss_scale() the scale. Without a graph the Step reads them back after the update (a sync,
// as the host form has one), so StepResult means what it means in the host form. The two forms
// give the same parameters, state, skips and norms bit for bit on the CPU (the same arithmetic;
// tests/mpi_trainer_capturable.cpp); on a GPU the same is expected where the kernels are
// deterministic (optim/'s capturable kernels are; not yet run through the Step on a GPU).
//
// Tensor parallelism (StepOptions::tp = T > 1). The trainer builds a dist::tp::Grid, the model over
// grid.tp() (dist/tp/bert.h), and the Step over grid.dp() with TpParts{&grid.tp(), layout}: DDP or
// ZeRO-1/2 then treat each TP shard as an ordinary parameter and average it over the ranks that
// hold the same shard (one DP group per TP index), exactly as without TP. What the TP group adds
// here: clipping takes the canonical model's norm (split squares summed over the TP group,
// replicated ones counted once: dist/tp/clip.h's rule, after ZeRO's sum over DP); the non-finite
// check already agrees over the whole world (nonfinite.h). state() is then this rank's TP shard of
// the optimizer state (on DP rank 0, or gathered there under ZeRO), which the trainer assembles
// over the TP group (dist/tp/shard.h) before it writes; the ledger's inputs are the shards, so its
// prediction divides the split layers by T by construction.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "apps/trainer/amp.h"           // defines: AmpRun
#include "apps/trainer/graph_capture.h" // defines: GraphCapture
#include "apps/trainer/param_groups.h"  // defines: ParamGroups
#include "apps/trainer/step_options.h"  // defines: StepOptions
#include "core/backend.h"               // defines: BackendScope
#include "core/tensor.h"                // defines: Tensor
#include "dist/communicator.h"          // defines: Communicator
#include "dist/ddp.h"                   // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"         // defines: LedgerOptions
#include "dist/extras/parameter_server.h"      // defines: ParameterServer
#include "dist/tp/shard.h"              // defines: TpLayout
#include "dist/zero.h"                  // defines: Zero
#include "layers/module.h"              // defines: ModulePtr
#include "optim/clip.h"                 // defines: GradClipper

namespace tandem::trainer {

// The cast and GEMM launches of one step, by dtype pair (core/ops/copy/launch_count.h), counted on
// every backend at the op layer: a CPU step counts what the GPU step launches. Under AMP the goal
// is casts == 0 (the optimizer writes the 16-bit weights, optim/amp.h) and f32_gemms == 0 (every
// matmul in the AMP dtype, core/autocast.h).
struct LaunchCounts {
  int64_t casts = 0;         // cast kernels (any dtype pair)
  int64_t f32_gemms = 0;     // GEMMs on f32 operands
  int64_t gemms = 0;         // all GEMMs
  int64_t misaligned_gemms = 0;  // 16-bit GEMMs with a row not a multiple of 8 elements (no full-speed
                                 // tensor cores on the GPU: pad that dimension, e.g. the vocabulary)
  std::string cast_pairs;    // "f32->bf16: 3, ..." or "none"
};

// What one step did.
struct StepResult {
  bool applied = true;         // false: every rank skipped this update (weights and state unchanged)
  enum class Skip { None, NonfiniteLoss, NonfiniteGradients } skipped = Skip::None;
  Tensor loss;                 // the step's loss (device; unscaled, the micro-batches' mean): valid
                               // until the next step, for the trainer's device-side running sum
  double grad_norm = -1;       // the global norm before clipping, when clipping ran (else -1); the
                               // capturable form's is the f32 its GradClipper keeps
  double host_ms = 0;          // host time issuing the step's work, without the waits for the
                               // device (the non-finite check's read) and without a graph capture
  bool replayed = false;       // cuda_graph: ran as a replay (the capturing step included)
  bool captured = false;       // cuda_graph: this step was captured
  LaunchCounts launches;       // cast and GEMM launches this step issued (a replay: its capture's)
};

// The communicators a Step uses; the trainer's set-up picks them (dist/transport/bootstrap.h's
// comm_for under mpiexec, a thread group's in the in-process tests), and no part of the Step looks
// one up. `data`: DDP, ZeRO and the parameter server, on the model's device (under TP the grid's DP
// group). `control`: a CPU communicator over every rank of the job, for the decisions all ranks must
// share - the non-finite verdict and AMP's found-inf flag (nonfinite.h, amp.h).
struct StepComms {
  explicit StepComms(dist::Communicator& cpu) : data(&cpu), control(&cpu) {}  // one CPU communicator for both
  StepComms(dist::Communicator& data_comm, dist::Communicator& control_comm) : data(&data_comm), control(&control_comm) {}
  dist::Communicator* data;
  dist::Communicator* control;
};

// The tensor-parallel side of a Step (StepOptions::tp > 1, see the file comment): the TP group and
// which canonical parameters the model splits.
struct TpParts {
  dist::Communicator* comm = nullptr;  // the grid's TP group; null without TP
  dist::tp::TpLayout layout;
};

class Step {
 public:
  // Loads a checkpoint's weights into the (cast) model and returns its optimizer entries (also the
  // "amp.*" ones), or {} for a fresh start. Called once, at the right moment (see above).
  using Restore = std::function<optim::NamedTensors(Module& model)>;
  // The trainer's loss for micro-batch `micro` of the step (0 when grad_accum_steps is 1).
  using ForwardLoss = std::function<Tensor(int micro)>;

  // `comms`: see StepComms. Throws the refusal when `options` cannot work here (step_options.h).
  // Under TP (options.tp > 1) comms.data is the grid's DP group and `tp` names the TP group.
  Step(ModulePtr model, StepComms comms, StepOptions options, const Restore& restore = {}, TpParts tp = {});
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // --- one step
  void set_lr(double lr);  // the optimizer's (and the servers') LR for the next update
  double lr() const;
  // Optimizer steps done before the next one, across resumes (the trainer sets it at start): the
  // step number messages and the watchdog name is this + 1. Every update adds one.
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  int64_t steps_done() const { return steps_done_; }
  StepResult run(const ForwardLoss& forward_loss);
  Tensor forward(const Tensor& x);
  template <class F>
  decltype(auto) forward_with(F&& f) {
    return ddp_->forward_with(std::forward<F>(f));
  }
  void zero_grad();
  void backward(const Tensor& loss);
  StepResult update();

  // While the guard lives, every parameter of the model is whole on every rank: under ZeRO-3 each
  // unit's parameters exist only while it runs (dist/zero3.h), so a trainer that reads the weights
  // outside the step (a checkpoint's, an evaluation that does not run the model through the Step)
  // takes one first. Collective under ZeRO-3 (every rank takes and drops it together); otherwise
  // it does nothing.
  [[nodiscard]] dist::FullParameters full_parameters() {
    return zero_ ? zero_->full_parameters() : dist::FullParameters(nullptr);
  }

  // --- checkpoint state (see the file comment). Collective under ZeRO: every rank calls it, and
  // only rank 0 (which writes checkpoints) gets the tensors; without ZeRO the other ranks get {}
  // and do no work.
  optim::NamedTensors state();
  void load_state(optim::NamedTensors state);
  // Before a checkpoint is written, under every non-finite policy: rank 0 counts the non-finite
  // elements of the model's parameters and buffers and of `state` (what state() returned; the
  // other ranks hold nothing more: identical weights, or shards rank 0 has gathered), and every
  // rank stops (RunStopped) when there are any. Collective. Settles the pending weight check.
  // ZeRO-3: call it while full_parameters() is held (the trainers hold it for the write anyway).
  void check_state_finite(const optim::NamedTensors& state);
  // After the run's last step: the non-finite check of the last update's weights (whose count
  // waits on the device for the next step's read). Collective; nothing under on_nonfinite off.
  void finish();

  // --- what reports and measurements read
  const StepOptions& options() const { return options_; }
  Module& module() { return ddp_->module(); }
  dist::DistributedDataParallel& ddp() { return *ddp_; }
  dist::Timeline& timeline() { return ddp_->timeline(); }
  DType compute_dtype() const { return amp_ ? amp_->low : DType::F32; }  // what the model computes in
  double loss_scale() const { return amp_ ? amp_->scaler.scale() : 0.0; }  // 0 without AMP (1 for bf16)
  const char* optimizer_name() const { return groups_->name(); }          // "SGD", "AdamW", "LAMB"
  const GraphCapture* graph() const { return graph_.get(); }              // null without cuda_graph
  bool capturable() const { return capturable_; }                          // the update's device-side form
  // Updates the device skipped (non-finite gradients under AMP) that no StepResult reported: under
  // cuda_graph those of this Step's steps so far (a device sync: call it at log time); else 0.
  int64_t skipped_unreported();
  // The memory ledger's inputs (ledger.h) with the optimizer's state bytes and precision filled in,
  // and the bytes the model state holds now (parameters, gradient buffers and shards, masters, and
  // the optimizer state that exists already: a resumed run loads it before its first step).
  dist::LedgerOptions ledger_options();
  int64_t model_state_bytes();
  // The launches of the last eager step (StepResult::launches): what the metrics JSON reports.
  const LaunchCounts& last_launches() const { return last_launches_; }

 private:
  void zero_grad_body();
  void backward_body(const Tensor& loss, bool last);
  bool update_body(StepResult& r);  // the update after the non-finite check; false: skipped
  bool update_capturable(StepResult& r);  // its device-side form (see "The capturable update")
  double clip_tp(double max_norm);        // TP: clips by the canonical model's norm; returns it
  StepResult run_graphed(const ForwardLoss& forward_loss);
  // The non-finite check before the update (nonfinite.h): true when every rank skips it.
  bool skip_nonfinite(int64_t number);
  std::vector<Tensor> checked_gradients() const;  // what the optimizer reads (empty under AMP)
  // The model's parameters (ZeRO-3: this rank's shards, unless `whole` - while full_parameters()
  // is held) and floating buffers.
  std::vector<Tensor> weights(bool whole = false) const;

  StepOptions options_;
  BackendScope backend_;  // first in, last out: the settings outlive every part below
  dist::Communicator& comm_;     // StepComms::data
  dist::Communicator& control_;  // StepComms::control
  TpParts tp_;
  ModulePtr model_;
  std::unique_ptr<AmpRun> amp_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<dist::Zero> zero_;
  std::unique_ptr<ParamGroups> groups_;
  std::unique_ptr<dist::ParameterServer> ps_;
  std::unique_ptr<GraphCapture> graph_;
  bool capturable_ = false;                     // options_.capturable || options_.cuda_graph
  std::unique_ptr<optim::GradClipper> clipper_; // capturable with clipping
  int64_t skips_seen_ = 0;                      // capturable AMP: the scaler's skipped count last read
  int64_t steps_done_ = 0;
  LaunchCounts last_launches_;
  int micro_ = 0;          // micro-batches backward has run since zero_grad
  Tensor step_loss_;       // their loss (the step's, reported)
  Tensor static_loss_;     // cuda_graph: the captured step's loss output
  Device device_;          // the model's
  Tensor pending_weights_; // non-finite count of the weights after the last update (device i64 [1],
                           // read with the next step's loss; undefined: nothing pending)
};

}  // namespace tandem::trainer
