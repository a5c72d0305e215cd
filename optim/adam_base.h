// optim/adam_base.h: what AdamW and LAMB share - Adam's two moments, the per-segment update count,
// hyperparameter defaults and checks, and grouping segments into fused CUDA launches (internal).
//
// State per segment: "exp_avg" and "exp_avg_sq" (zeros before the first step, as in PyTorch) and
// the update count (Slot::step, optim/optimizer.h): a step is t = count + 1, so bias corrections
// use t = 1 at the first step, and the count advances after the update unless the step was skipped
// on the device. The CPU loops read and advance the count on the host; the CUDA kernels read it,
// and the device-side LR, from device memory (capturable, optim/kernels/adamw.h). Segments are
// grouped by (dtype, device) only: each block computes its own segment's bias corrections, so
// segments at different step counts share one launch and the chunk table never changes between
// steps - a model on one GPU in one dtype is one group (under AMP also by the 16-bit copy's dtype:
// the masters of 16-bit parameters, and BatchNorm's f32 parameters without a copy).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/kernels/adamw.h"
#include "optim/optimizer.h"

namespace tandem::optim {

// What an unset OptimizerOptions field means for one optimizer (its reference's defaults).
struct AdamDefaults {
  const char* name;  // for error messages
  double weight_decay, eps;
};

class AdamBase : public Optimizer {
 protected:
  // Resolved hyperparameters (OptimizerOptions with each unset optional given its default).
  struct Hyper {
    double weight_decay, beta1, beta2, eps;
  };
  AdamBase(NamedTensors named_params, const OptimizerOptions& opt, AdamDefaults d);
  AdamBase(std::vector<ParamSegment> segments, int64_t num_params, const OptimizerOptions& opt, AdamDefaults d);

  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool has_step_count() const override { return true; }

  // Allocates zero moments at a segment's first step (the count is allocated by Optimizer::step).
  static void begin_step(Slot& s);
  // CPU: advances the segment's count and returns this step's t.
  static int64_t advance_cpu(Slot& s);
  // The active slots split by (dtype, device), in first-seen order.
  static std::vector<std::vector<Slot*>> launch_groups(const std::vector<Slot*>& active);
  // The run-constant kernel arguments (f64 hyperparameters rounded once to f32, and the originals).
  kernels::AdamConst device_const() const;
  // The kernels' view of a group's segments (pointers, sizes, counts, parameter indices).
  static std::vector<kernels::AdamTensor> device_tensors(const std::vector<Slot*>& group);
  // Per-group device state (kept across steps so the chunk tables upload once, and the LR lives there).
  std::shared_ptr<kernels::AdamCudaGroup>& group_state(size_t group);
  void lr_changed() override;  // CUDA: writes the new LR into every group's device copy

  Hyper h_;
  OptimizerOptions opt_;  // as given (norm_reduce for LAMB)

 private:
  std::vector<std::shared_ptr<kernels::AdamCudaGroup>> groups_;
};

// What AdamW and LAMB declare alike: the two public constructors (named parameters, or segments)
// and name(), all from Derived::kDefaults, the optimizer's reference defaults.
template <class Derived>
class AdamFamily : public AdamBase {
 public:
  AdamFamily(NamedTensors named_params, const OptimizerOptions& opt = {})
      : AdamBase(std::move(named_params), opt, Derived::kDefaults) {}
  AdamFamily(std::vector<ParamSegment> segments, int64_t num_params, const OptimizerOptions& opt = {})
      : AdamBase(std::move(segments), num_params, opt, Derived::kDefaults) {}
  const char* name() const override { return Derived::kDefaults.name; }
};

}  // namespace tandem::optim
