// apps/trainer/step/ema.h: an exponential moving average of the model's weights (--model-ema), kept
// beside the trained weights, validated and saved with them.
// In full: apps/trainer/step/README.md ("ema.h in detail").
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
