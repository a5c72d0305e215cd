// optim/amp.h: f32 master weights for mixed-precision training (bf16 or fp16).
//
// The model computes in 16-bit (its parameters are f16/bf16, except the ones the AMP policy keeps in
// f32: BatchNorm's, see core/autocast.h). A 16-bit weight cannot take small updates: lr * grad is
// often below half a unit in the last place of the weight and would round away. So MasterWeights
// keeps an f32 copy of every 16-bit parameter, and the optimizer (built over master_segments())
// updates the copies, with f32 state. One step:
//   1. unscale_and_check(model grads, 1 / loss_scale): master_grad = float(grad) / scale, and whether
//      any value was inf/NaN - one fused pass per dtype (CPU loop, one CUDA multi-tensor launch);
//   2. the caller makes the skip decision the same on every rank (all-reduce of the flag; see
//      apps/train), feeds it to LossScaler::update, and on a clean step runs optimizer.step(),
//      which also rounds each updated master into its 16-bit parameter (to nearest even) in the
//      same pass: master_segments() names the 16-bit tensor as ParamSegment::low, and every update
//      kernel (SGD, AdamW, LAMB; CPU loops and CUDA multi-tensor launches) stores both. So a step
//      runs no cast kernel for the weights (issue 17.2: a separate copy-back was one cast launch
//      per parameter, ~300 per bert_large step) and reads each master once.
//   copy_to_model() still rounds every master into the model as a separate pass: for what changes
//   the masters outside the optimizer (load_state) and for optimizers not built from
//   master_segments(); the steps below do not call it.
// f32 parameters (BatchNorm) are their own masters: the optimizer updates them in place, and only
// their gradients are unscaled (into master gradient buffers, so every segment looks alike).
//
// ZeRO (dist/zero.h, built): MasterWeights works on ParamSegments (optim/optimizer.h), not on
// parameters. The unsharded case passes whole parameters (segments_from_parameters); ZeRO passes
// Zero::segments() - this rank's shard, 1-D views into the 16-bit parameters - and, each step, the
// gradient views of the same segments (16-bit slices of the all-reduced buckets at stage 1, of the
// reduce-scattered shards at stage 2). So each rank keeps f32 masters, master gradients and
// optimizer state for its shard only; the optimizer's update writes the rounded masters into the
// shard's 16-bit parameter views (ParamSegment::low), and Zero::gather_parameters() then all-gathers the 16-bit parameters as
// for f32. Master segments carry the model segments' name, offset, param_numel and param_index, so
// optimizer state stays canonical across world sizes. With ZeRO every rank sees only its shard's
// gradients, so the found-inf flag must be reduced across ranks (an all-reduce of the flag: apps/train/amp.h any_rank_found_inf), and a
// global norm for clipping must be summed across the shards (Zero::sum_reduce()).
// Checkpoints: state() returns the masters of the 16-bit segments under the parameters' names, as
// 1-D f32 slices with their offsets (StateSlice), so resuming keeps the f32 bits exactly.
//
// A captured step (a CUDA graph of a bf16 or fp16 step; core/cuda/graph.h). The eager step above
// reads the found-inf flag on the host (and clipping reads the norm), which a CUDA graph cannot
// hold. The device-side step keeps every decision on the device, so the step makes no host read:
//   setup:  LossScaler with LossScalerOptions::device = the GPU (tensor mode); the optimizer over
//           master_segments() (any of SGD, AdamW, LAMB: capturable(); LAMB under ZeRO with
//           norm_reduce_device, not norm_reduce); a GradClipper if clipping (optim/clip.h), with
//           a DeviceSumReduce under ZeRO.
//   per step, every tensor allocated before the capture and the same at every step:
//     optimizer.set_lr(lr)                    outside the graph: writes the device-side LR
//     loss = scaler.scale_loss(loss)          the multiplier is read on the device
//     backward                                [DDP/ZeRO all-reduce or reduce-scatter, NCCL]
//     amp_step_device(master, scaler, optimizer, grads, {found_inf_reduce, &clipper}):
//       1. master.unscale_and_flag(grads, scaler.scale_tensor(), scaler.found_inf())
//       2. found_inf_reduce(scaler.found_inf()): the caller's all-reduce of the f32 [1] flag with
//          op max (or sum: only "nonzero" is read) on the compute stream, or forked from it and
//          joined back through events - NCCL inside the graph; null where every rank already
//          sees the same gradients (one process, DDP after its average)
//       3. clipper.clip(master grads): norm and coefficient on the device
//       4. optimizer.step(scaler.found_inf()): skipped on the device where it is nonzero; it writes
//          the 16-bit parameters with the masters (step 2 of the host form), skipped alike
//       5. scaler.update_on_device(): backoff or growth of the scale tensor, skipped-step count
//     [ZeRO: gather the parameters - on a skipped step they are unchanged, so it is harmless]
//   reporting, outside the graph: scaler.scale(), scaler.skipped_steps(), clipper.norm().item():
//     each a device sync, so read them at log intervals, not every step.
// Run the step eagerly once or more before capturing (the optimizer's state, the chunk tables and
// the clipper's tensors are allocated then); eager and replayed steps run the same kernels on the
// same addresses, so a replayed step equals an eager one bitwise. On the CPU the same calls run
// the same rules in plain loops (what the tests compare with the eager step).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace tandem::optim {

namespace kernels {
class DeviceTable;  // optim/cuda/multi_tensor.cuh
}

// Every parameter as one whole segment, in order (the unsharded case).
std::vector<ParamSegment> segments_from_parameters(const NamedTensors& named_params);

class MasterWeights {
 public:
  // model: the segments the model computes with (any floating dtype; grad fields are ignored).
  explicit MasterWeights(std::vector<ParamSegment> model);

  // f32 segments to build the optimizer from: param is the master (the model's own tensor for f32
  // segments), grad the master gradient buffer that unscale_and_check writes, low the 16-bit model
  // tensor the update writes too (undefined for f32 segments).
  std::vector<ParamSegment> master_segments() const;
  // This step's gradients of the model segments (segment order): param.grad() of whole segments.
  // ZeRO passes its own shard views to unscale_and_check instead.
  std::vector<Tensor> model_grads() const;
  // Step 1 above. grads: one per model segment, same numel (undefined: no gradient this step - its
  // master gradient is undefined too, so the optimizer skips it). Returns true when this rank saw an
  // inf or NaN. Synchronises with the device once (to read the flag).
  bool unscale_and_check(const std::vector<Tensor>& grads, double inv_scale);
  // The master gradients after the last unscale_and_check (undefined where there was no gradient):
  // Optimizer::set_grads takes them.
  std::vector<Tensor> master_grads() const;
  // Rounds the f32 masters into the 16-bit model parameters, as a separate pass (see the file
  // comment: the steps leave it to the optimizer's update).
  void copy_to_model();

  // A captured step's step 1 (see the file comment): zeroes found_inf (f32 [1]), then unscales as
  // unscale_and_check with inv_scale = float(1 / double(scale)) read from the f32 [1] tensor `scale`
  // on the device, and sets found_inf to 1 where a value was inf or NaN. No host read; the
  // gradients must all be on found_inf's device. master_grads() then holds the results.
  void unscale_and_flag(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf);
  // copy_to_model(), skipped on the device where found_inf is nonzero (capturable).
  void copy_to_model(const Tensor& found_inf);
  // Re-reads the masters from the model (after loading 16-bit weights without saved masters).
  void copy_from_model();

  std::vector<StateSlice> state_slices() const;  // "<name>" -> master values (16-bit segments only)
  // Loads masters from unsharded f32 tensors (name -> whole parameter), each segment its range;
  // names not held here are skipped; then copy_to_model().
  void load_state(const NamedTensors& masters);
  size_t size() const { return segs_.size(); }
  // Bytes this object allocated: f32 masters of the 16-bit segments and every master gradient
  // buffer (the memory ledger counts them as model state).
  int64_t bytes() const;

 private:
  struct Seg {
    ParamSegment model;  // the 16-bit (or f32) tensor the model computes with
    Tensor master;       // f32; the same tensor as model.param for f32 segments
    Tensor master_grad;  // f32 buffer, allocated once
    bool has_grad = false;
  };
  std::vector<Seg> segs_;
  // The capturable passes' chunk tables per (device, dtype), kept between steps (CUDA builds).
  using TableKey = std::pair<int, DType>;
  std::map<TableKey, std::shared_ptr<kernels::DeviceTable>> unscale_tables_, copy_tables_;
};

// Makes one rank's overflow flag the decision of every rank (an all-reduce with op max or logical
// or); null: this rank alone decides (one process, or DDP, whose averaged gradients are identical on
// every rank - each rank then finds the same flag by itself).
using FoundInfReduce = std::function<bool(bool local_found_inf)>;

// What one amp_step does besides unscale / step / copy back. Defaults: this rank decides alone, no
// clipping.
struct AmpStepOptions {
  FoundInfReduce found_inf_reduce;  // see FoundInfReduce; required under ZeRO
  // > 0: clip the unscaled f32 master gradients to this global L2 norm (optim/clip.h) before the
  // step - after the skip decision, so a skipped step stays skipped and clean steps clip by the
  // true norm, not the loss-scaled one.
  double clip_grad_norm = 0;
  SumSquaresReduce norm_reduce;  // sharded masters (ZeRO): sums the squares across ranks
};

// One mixed-precision optimizer step over `grads` (one per MasterWeights segment): unscale and
// check, agree on the flag, update the scaler, and on a clean step [clip,] run the optimizer on the
// masters and round them into the model. Returns false when the step was skipped (parameters
// unchanged). The optimizer must have been built from master.master_segments(). Under ZeRO the
// caller all-gathers the parameters after a clean step.
bool amp_step(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
              const AmpStepOptions& options);
bool amp_step(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
              const FoundInfReduce& reduce = {});

// The captured step's counterpart of FoundInfReduce: makes the f32 [1] flag every rank's decision in
// place, on the device (an all-reduce with op max or sum); null: this rank decides alone.
using DeviceFlagReduce = std::function<void(Tensor& found_inf)>;

struct DeviceAmpStepOptions {
  DeviceFlagReduce found_inf_reduce;  // see DeviceFlagReduce; required under ZeRO
  // Clips the unscaled master gradients on the device after the flag is agreed (its norm() then
  // holds this step's norm); null: no clipping. The same object at every step (it keeps tables).
  GradClipper* clip = nullptr;
};

// amp_step with no host read, for a captured step (see "A captured step" above): the scaler must be
// in tensor mode, the optimizer built from master.master_segments(). Whether the step was applied
// is on the device (the scaler's skipped-step count).
void amp_step_device(MasterWeights& master, LossScaler& scaler, Optimizer& optimizer, const std::vector<Tensor>& grads,
                     const DeviceAmpStepOptions& options = {});

}  // namespace tandem::optim
