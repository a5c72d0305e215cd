// apps/trainer/step/nonfinite.h: what every rank does when a step's loss, its gradients or the weights
// hold NaN or inf on any rank (StepOptions::on_nonfinite; the Step calls it).
// In full: apps/trainer/step/README.md ("nonfinite.h in detail").
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/trainer/step/option_names.h"  // defines: OptionNames
#include "dist/communicator.h"          // defines: Communicator

namespace tandem::trainer {

enum class OnNonfinite { Stop, Skip, Off };
OnNonfinite on_nonfinite_from_name(const std::string& name);  // "stop" | "skip" | "off"

// Thrown on every rank by the stop policy, after the message was printed.
struct RunStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What one rank found (its own loss; counts of non-finite elements it checked).
struct Health {
  float loss = 0;          // the step's loss (0 when no loss is checked)
  int64_t gradients = 0;   // non-finite gradient elements
  int64_t weights = 0;     // non-finite parameter / buffer / state elements
};

// Every rank's findings, the same on every rank.
struct NonfiniteVerdict {
  struct Bad {
    int rank = 0;
    Health found;
    bool loss_bad = false;  // found.loss is NaN or infinite
  };
  std::vector<Bad> ranks;  // ranks that found anything, in rank order
  int me = 0;              // the rank this verdict was agreed on (messages name it)
  bool any() const { return !ranks.empty(); }
  bool loss_or_gradients() const;
  bool weights() const;
};

// Collective over `control` (a CPU communicator over every rank of the job): every rank passes what
// it found; every rank gets the same verdict. Counts travel as f32 (exact below 2^24, and never 0
// when they are not).
NonfiniteVerdict agree_nonfinite(dist::Communicator& control, const Health& mine);

// Applies `policy` to a step's verdict for 1-based `step` (see the file comment). Returns true when
// every rank must skip this step's update; throws RunStopped to stop.
bool act_on_nonfinite(OnNonfinite policy, const NonfiniteVerdict& v, int64_t step, const OptionNames& names = {});

// Collective over `control`: stops every rank (RunStopped) when any rank counted `bad` > 0
// non-finite elements in the state it is about to `action` (e.g. "write to a checkpoint"), after
// `step` steps.
void check_state_finite(dist::Communicator& control, int64_t bad, int64_t step, const std::string& action,
                        const OptionNames& names = {});

}  // namespace tandem::trainer
