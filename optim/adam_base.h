// optim/adam_base.h: what AdamW and LAMB share - Adam's two moments, the per-segment step count,
// hyperparameter defaults and checks, and grouping segments into fused CUDA launches (internal).
//
// State per segment: "exp_avg" and "exp_avg_sq" (zeros before the first step, as in PyTorch) and
// the step count t, advanced before the update so bias corrections use t = 1 at the first step.
// Segments are grouped by (dtype, device, step): one fused launch per group takes one set of bias
// corrections as kernel arguments, so the device chunk table never changes between steps. A model
// whose parameters all had every gradient is one group.
#pragma once
#include <memory>
#include <string>
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

  // Allocates zero moments at a segment's first step, then advances its step count.
  static void begin_step(Slot& s);
  // The active slots (after begin_step) split by (dtype, device, step), in first-seen order.
  static std::vector<std::vector<Slot*>> launch_groups(const std::vector<Slot*>& active);
  // The kernels' per-step scalars for step t, from the current lr (f64, rounded once to f32).
  kernels::AdamHyper device_hyper(int64_t t) const;
  // The kernels' view of a group's segments (pointers, sizes, parameter indices).
  static std::vector<kernels::AdamTensor> device_tensors(const std::vector<Slot*>& group);
  // Per-group device tables (kept across steps so the chunk tables upload once).
  std::shared_ptr<kernels::DeviceTable>& table(size_t group, size_t which);

  Hyper h_;
  OptimizerOptions opt_;  // as given (norm_reduce for LAMB)

 private:
  std::vector<std::shared_ptr<kernels::DeviceTable>> tables_;
};

}  // namespace tandem::optim
