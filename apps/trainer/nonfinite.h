// apps/trainer/nonfinite.h: what every rank does when a step's loss - or, with fp16 dynamic loss
// scaling, a gradient - is not finite on any rank (StepOptions::on_nonfinite; the Step calls it).
//
// Ranks must agree: if one rank skipped its update and the others did not, their weights would
// part ways for good; if one rank stopped, the others would wait for it in the next collective.
// So each rank contributes its value to one small all-reduce and all of them act on the same
// verdict (agree_nonfinite), then follow the policy (act_on_nonfinite):
//   stop  every rank prints "[rank R] step S: loss is nan ..." naming the rank(s) and value(s) and
//         throws RunStopped, before the optimizer step and before any checkpoint, so nothing is
//         ever saved from the poisoned state; a trainer then exits (train_imagenet with status 3);
//   skip  every rank drops this step's update (the gradients are thrown away, the weights and
//         optimizer state stay as they were); the step still counts, so the LR schedule and the
//         data order go on as in a run without the bad step;
//   off   no check at all (no collective, no host sync).
// fp16 loss scaling calls the same path: skip_nonfinite_step(OnNonfinite::Skip, found_inf ?
// INFINITY : 0, step, "gradient") and lowers its scale when it returns true.
//
// Cost per step: one all-reduce of 2 x world floats on the CPU communicator (microseconds), and on
// a GPU one device-to-host read of the loss. That read waits for the step's queued work (it is
// taken after backward was queued, so the GPU is busy meanwhile), which keeps the host from
// queueing the next step's kernels ahead: a launch-latency bubble per step, small next to a
// ResNet-50 step but visible on tiny models; the policy off removes it for benchmarks.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/trainer/option_names.h"  // defines: OptionNames

namespace tandem::trainer {

enum class OnNonfinite { Stop, Skip, Off };
OnNonfinite on_nonfinite_from_name(const std::string& name);  // "stop" | "skip" | "off"

// Thrown on every rank by the stop policy, after the message was printed.
struct RunStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct NonfiniteVerdict {
  std::vector<int> ranks;     // ranks whose value was NaN or infinite, in rank order (same on every rank)
  std::vector<float> values;  // their values
  bool any() const { return !ranks.empty(); }
};

// Collective over the CPU communicator: every rank passes its value (a loss, or INFINITY for a
// found-inf flag); every rank gets the same verdict.
NonfiniteVerdict agree_nonfinite(float value);

// Applies `policy` to a verdict for 1-based `step`; `what` names the value ("loss"). Returns true
// when every rank must skip this step's update; throws RunStopped for stop.
bool act_on_nonfinite(OnNonfinite policy, const NonfiniteVerdict& v, int64_t step, const std::string& what,
                      const OptionNames& names = {});

// Both: the step loop's and the loss scaler's one call. Off returns false without a collective.
bool skip_nonfinite_step(OnNonfinite policy, float value, int64_t step, const std::string& what,
                         const OptionNames& names = {});

}  // namespace tandem::trainer
