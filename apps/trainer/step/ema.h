// apps/trainer/step/ema.h: an exponential moving average of the model's weights (--model-ema), kept
// beside the trained weights, validated and saved with them.
//
// After every applied optimizer step (a skipped step changes nothing), for every parameter p:
//     ema <- decay * ema + (1 - decay) * p
// starting from the weights the run starts from (a fresh init, --weights, or the checkpoint's when
// it has no EMA). So after k steps from e_0: e_k = decay^k e_0 + (1 - decay) sum_t decay^(k-t) p_t
// (tests/test_ema.cpp checks exactly this). The buffers (BatchNorm's running statistics) are not
// averaged: the EMA weights are evaluated with the model's current buffers, which is what
// torchvision's ExponentialMovingAverage(use_buffers=True) copies and timm's ModelEmaV2 copies at
// every update - here without the copy (train_imagenet's loop has just agreed on them, bn_stats.h).
//
// Decay: 0.9998 per step by default, timm's ModelEmaV3 default (an averaging horizon of
// 1/(1 - decay) = 5,000 steps). torchvision's reference uses 0.99998 applied every 32 steps with an
// adjustment for the global batch; per step, as here, is simpler to state and to resume. A run much
// shorter than the horizon mostly averages its own initialisation: pass a smaller decay (e.g. 0.99,
// 100 steps) for such runs. No warm-up ramp (timm's use_warmup): the closed form above stays exact.
//
// Storage: f32 for 16-bit (--amp) parameters, the parameter's dtype otherwise; on the model's
// device; one model's parameters more per rank (the memory ledger does not count it as model
// state: it exists before the ledger's plan(), so it is part of the allocator's "other"). The
// update is one axpby per tensor (core/ops/elementwise), not a fused multi-tensor launch: ResNet-50's
// 161 tensors cost ~161 small launches per step on a GPU (a fused lerp like optim/cuda's
// multi-tensor kernels would make it one; not written yet).
// Strategies: the whole parameters must exist on every rank after the step - DDP, ZeRO-1 and -2
// (after their all-gather). ZeRO-3 keeps only shards and the parameter server updates on its
// servers: ema_refusal() names them.
// Checkpoints: the EMA travels in the checkpoint's optimizer channel as "ema.<param>" (so the file
// holds "optimizer.ema.<param>", beside AMP's "optimizer.amp.master.<param>"), in PyTorch's layout
// (conv weights OIHW): a PyTorch user loads it with
//   {k[len("optimizer.ema."):]: v for k, v in load_file(f).items() if k.startswith("optimizer.ema.")}
// plus the file's buffers. take_state() takes those entries out of a checkpoint's optimizer entries
// before the Step loads the rest; a resume restores them bit for bit.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/trainer/step/step_options.h"  // defines: StepOptions
#include "layers/module.h"              // defines: Module
#include "checkpoint/state_dict.h"          // defines: NamedTensors

namespace tandem::trainer {

// Why --model-ema cannot run with these step options (ZeRO-3, the parameter server), named through
// o.names; nullopt when it can.
std::optional<std::string> ema_refusal(const StepOptions& o);

class ModelEma {
 public:
  static constexpr const char* kPrefix = "ema.";
  // Starts from `model`'s parameters as they are now (every rank's are equal: after DDP's broadcast).
  ModelEma(Module& model, double decay);

  double decay() const { return decay_; }
  // ema <- decay * ema + (1 - decay) * param, for every parameter. Call after each applied step.
  void update();
  // "ema.<param>" -> the average, conv weights OIHW (PyTorch's layout), on the model's device.
  NamedTensors state() const;
  // Removes the "ema.*" entries from a checkpoint's optimizer entries and returns them (names kept).
  static NamedTensors take_state(NamedTensors& optimizer_entries);
  // Restores what state() returned (take_state's entries): every parameter must be there, with its
  // shape; the file's layout (OIHW) is converted back. Throws naming what is missing.
  void load_state(const NamedTensors& entries, const std::string& source);
  int64_t bytes() const;

  // While it lives, the model's parameters hold the EMA (cast to the parameters' dtype); the trained
  // weights come back when it ends. For a validation pass; not across a training step.
  class Applied {
   public:
    explicit Applied(ModelEma& ema);
    ~Applied();
    Applied(const Applied&) = delete;
    Applied& operator=(const Applied&) = delete;

   private:
    ModelEma& ema_;
    std::vector<Tensor> saved_;
  };

 private:
  Module& model_;
  double decay_;
  std::vector<std::string> names_;  // the model's parameter names, in order
  std::vector<Tensor> params_;      // the model's parameters (handles)
  std::vector<Tensor> average_;     // their EMA (f32 for 16-bit parameters)
  std::vector<bool> conv_;          // stored OIHW in state()
};

}  // namespace tandem::trainer
