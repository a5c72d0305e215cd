// apps/trainer/step/step.h: one training step - the object both trainers share.
//
// A Step is built from a model, the communicators it uses (StepComms) and one StepOptions
// (step_options.h), and owns everything between the trainer's loss and the updated weights: DDP,
// ZeRO-1/2/3 or the parameter server, AMP, the optimizer, clipping, gradient accumulation, CUDA-graph
// capture and the non-finite policy. Every combination either works or is refused by the
// constructor, with the reason. Its fixed construction order, the phases of one step, the
// capturable update and tensor parallelism are written out in apps/trainer/step/README.md ("The Step").
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/trainer/step/amp.h"           // defines: AmpRun
#include "apps/trainer/step/graph_capture.h" // defines: GraphCapture
#include "apps/trainer/step/param_groups.h"  // defines: ParamGroups
#include "apps/trainer/step/step_options.h"  // defines: StepOptions
#include "apps/trainer/step/strategy.h"      // defines: StepStrategy, TpParts
#include "core/backend.h"               // defines: BackendScope
#include "core/tensor.h"                // defines: Tensor
#include "dist/communicator.h"          // defines: Communicator
#include "dist/ddp.h"                   // defines: DistributedDataParallel
#include "dist/measure/memory_ledger.h"         // defines: LedgerOptions
#include "dist/zero.h"                  // defines: Zero
#include "layers/module.h"              // defines: ModulePtr

namespace tandem::trainer {

class ModelEma;  // ema.h

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
  std::vector<Tensor> kept;    // the batch form's Step::keep outputs, the last micro-batch's, in order
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
  // --model-ema's average (ema.h), updated by the Step after every applied update, so the loops
  // need not (not owned: it must outlive the Step's updates; null, the default: none).
  void set_ema(ModelEma* ema) { ema_ = ema; }
  // Optimizer steps done before the next one, across resumes (the trainer sets it at start): the
  // step number messages and the watchdog name is this + 1. Every update adds one.
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  int64_t steps_done() const { return steps_done_; }
  StepResult run(const ForwardLoss& forward_loss);
  // The batch form, which both trainers use: `batch` holds the step's tensors (inputs, labels), each
  // with grad_accum_steps micro-batches' rows, and loss(micro, m) gets micro-batch m's rows of each
  // ([m R/N, (m + 1) R/N)). Under cuda_graph the Step copies the batch into static tensors it owns
  // (allocated from the first batch; a batch of another shape is refused) and hands those out: the
  // captured step reads the same addresses on every replay, so no trainer stages batches itself.
  using BatchLoss = std::function<Tensor(const std::vector<Tensor>& micro, int m)>;
  StepResult run(const std::vector<Tensor>& batch, const BatchLoss& loss);
  // Inside the batch form's loss: an output the trainer reads after the step (its logits, for the
  // top-1), returned detached; StepResult::kept holds the last micro-batch's. Under cuda_graph a
  // static tensor that every replay rewrites, so a replayed step (whose loss is not called) has it.
  Tensor keep(const Tensor& output);
  // Called after every applied update, after the EMA's, in the order added (the trainers measure
  // the memory ledger after the first one: apps/trainer/run/memory.h), so no loop asks.
  void add_post_update(std::function<void()> hook) { post_update_.push_back(std::move(hook)); }
  // Bytes of the batch in hand (the last batch-form run's) and of the static copies cuda_graph keeps:
  // data, which the memory ledger does not count as model state.
  int64_t batch_bytes() const { return batch_bytes_; }
  int64_t static_batch_bytes() const;
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
    return strategy_->full_parameters();
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
  bool update_body(StepResult& r);  // the strategy's update after the non-finite check; false: skipped
  StepResult run_graphed(const ForwardLoss& forward_loss);
  const std::vector<Tensor>& stage(const std::vector<Tensor>& batch);  // cuda_graph: into static_batch_
  void after_update();  // the EMA, then the post-update hooks
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
  ModulePtr model_;
  std::unique_ptr<AmpRun> amp_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<StepStrategy> strategy_;  // DDP, ZeRO-1/2, ZeRO-3, ps, or TP over one (strategy.h)
  std::unique_ptr<ParamGroups> groups_;
  std::unique_ptr<GraphCapture> graph_;
  bool capturable_ = false;                     // options_.capturable || options_.cuda_graph
  int64_t skips_seen_ = 0;                      // capturable AMP: the scaler's skipped count last read
  int64_t steps_done_ = 0;
  ModelEma* ema_ = nullptr;  // set_ema
  LaunchCounts last_launches_;
  int micro_ = 0;          // micro-batches backward has run since zero_grad
  Tensor step_loss_;       // their loss (the step's, reported)
  Tensor static_loss_;     // cuda_graph: the captured step's loss output
  std::vector<Tensor> static_batch_;  // cuda_graph: the batch the captured step reads (stage)
  std::vector<Tensor> kept_;          // keep()'s outputs (cuda_graph: static, written by every replay)
  size_t keep_slot_ = 0;              // keep()'s index within the current micro-batch
  int64_t batch_bytes_ = 0;
  std::vector<std::function<void()>> post_update_;
  Device device_;          // the model's
  Tensor pending_weights_; // non-finite count of the weights after the last update (device i64 [1],
                           // read with the next step's loss; undefined: nothing pending)
};

}  // namespace tandem::trainer
