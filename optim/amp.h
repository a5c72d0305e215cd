// optim/amp.h: f32 master weights for mixed-precision training (--amp bf16|fp16).
//
// The model computes in 16-bit (its parameters are f16/bf16, except the ones the AMP policy keeps in
// f32: BatchNorm's, see core/autocast.h). A 16-bit weight cannot take small updates: lr * grad is
// often below half a unit in the last place of the weight and would round away. So MasterWeights
// keeps an f32 copy of every 16-bit parameter, and the optimizer (built over master_segments())
// updates the copies, with f32 state. One step:
//   1. unscale_and_check(model grads, 1 / loss_scale): master_grad = float(grad) / scale, and whether
//      any value was inf/NaN - one fused pass per dtype (CPU loop, one CUDA multi-tensor launch);
//   2. the caller makes the skip decision the same on every rank (all-reduce of the flag; see
//      apps/train), feeds it to LossScaler::update, and on a clean step runs optimizer.step();
//   3. copy_to_model(): rounds the masters into the 16-bit parameters (to nearest even).
// f32 parameters (BatchNorm) are their own masters: the optimizer updates them in place, and only
// their gradients are unscaled (into master gradient buffers, so every segment looks alike).
//
// ZeRO (dist/zero.h, built): MasterWeights works on ParamSegments (optim/optimizer.h), not on
// parameters. The unsharded case passes whole parameters (segments_from_parameters); ZeRO passes
// Zero::segments() - this rank's shard, 1-D views into the 16-bit parameters - and, each step, the
// gradient views of the same segments (16-bit slices of the all-reduced buckets at stage 1, of the
// reduce-scattered shards at stage 2). So each rank keeps f32 masters, master gradients and
// optimizer state for its shard only; copy_to_model() writes the rounded masters into the shard's
// 16-bit parameter views, and Zero::gather_parameters() then all-gathers the 16-bit parameters as
// for f32. Master segments carry the model segments' name, offset, param_numel and param_index, so
// optimizer state stays canonical across world sizes. With ZeRO every rank sees only its shard's
// gradients, so the found-inf flag must be reduced across ranks (an all-reduce of the flag: apps/train/amp.h any_rank_found_inf), and a
// global norm for clipping must be summed across the shards (Zero::sum_reduce()).
// Checkpoints: state() returns the masters of the 16-bit segments under the parameters' names, as
// 1-D f32 slices with their offsets (StateSlice), so resuming keeps the f32 bits exactly.
#pragma once
#include <functional>
#include <vector>

#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace tandem::optim {

// Every parameter as one whole segment, in order (the unsharded case).
std::vector<ParamSegment> segments_from_parameters(const NamedTensors& named_params);

class MasterWeights {
 public:
  // model: the segments the model computes with (any floating dtype; grad fields are ignored).
  explicit MasterWeights(std::vector<ParamSegment> model);

  // f32 segments to build the optimizer from: param is the master (the model's own tensor for f32
  // segments), grad the master gradient buffer that unscale_and_check writes.
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
  // Step 3 above: rounds the f32 masters into the 16-bit model parameters.
  void copy_to_model();
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

}  // namespace tandem::optim
