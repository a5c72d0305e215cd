// apps/trainer/step/nonfinite.h: what every rank does when a step's loss, its gradients or the weights
// hold NaN or inf on any rank (StepOptions::on_nonfinite; the Step calls it).
//
// Ranks must agree: if one rank skipped its update and the others did not, their weights would
// part ways for good; if one rank stopped, the others would wait for it in the next collective.
// So each rank contributes what it found to one small all-reduce and all of them act on the same
// verdict (agree_nonfinite), then follow the policy (act_on_nonfinite):
//   stop  a non-finite loss or gradient: every rank prints "[rank R] step S: loss is nan ..."
//         (or "gradients hold N non-finite values ...") naming the rank(s) and value(s) and throws
//         RunStopped, before the optimizer step and before any checkpoint, so nothing is ever saved
//         from the poisoned state; a trainer then exits with status 3;
//   skip  every rank drops this step's update (the gradients are thrown away, the weights and
//         optimizer state stay as they were); the step still counts, so the LR schedule and the
//         data order go on as in a run without the bad step;
//   off   no per-step check at all (no collective, no host sync).
// Non-finite weights (parameters and buffers: an update that overflowed, or a checkpoint loaded
// with NaN in it) stop the run under stop and skip alike: skipping later steps cannot undo them.
//
// What is checked, and when (the Step does it; step.h):
//   each step, before the update: the loss, and the gradients as the optimizer will read them
//     (this rank's ZeRO shard; under --amp the loss scaler's own unscale check decides instead,
//     and always skips, since an fp16 overflow is the scaler's normal signal);
//   the weights after step k's update are counted on the device right after it and read with
//     step k+1's loss (a device-side count, no extra sync), and right after a resume's load;
//   before a checkpoint is written, and under every policy, off included: the whole state to be
//     saved - weights, buffers, optimizer state, AMP's masters (check_state_finite), so no
//     checkpoint ever holds a non-finite tensor;
//   at the end of the run: the last update's weights (Step::finish).
// Cost per step: two device-side counts (one kernel per dtype over the gradients and over the
// weights, each element read once), one host read of three numbers - the loss and the two counts,
// copied into one small tensor - and one all-reduce of 4 x world floats on the Step's CPU communicator
// (microseconds). That read waits for the step's queued work (it is taken after backward was
// queued, so the GPU is busy meanwhile), which keeps the host from queueing the next step's kernels
// ahead: a launch-latency bubble per step, small next to a ResNet-50 step but visible on tiny
// models; the policy off removes it for benchmarks.
// fp16 loss scaling keeps its own agreement on its found-inf flag (amp.h any_rank_found_inf).
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
