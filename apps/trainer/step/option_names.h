// apps/trainer/step/option_names.h: how the training-step library names its options in messages.
//
// A refusal ("cuda_graph cannot capture clip_grad_norm: ...") or a run-time notice ("every rank
// skips this step's update (on_nonfinite = skip)") names options. The library's own names are its
// StepOptions fields; a trainer's user knows the trainer's flags instead. So every message is
// written with an OptionNames, a function from (option, value) to the words for it: by default the
// library's ("StepOptions::optimizer = adamw"), and each trainer passes its own ("--optimizer
// adamw"), so its users read the flags they typed. `value` may be empty ("drop --clip-grad-norm").
// Option keys are the StepOptions field names (step_options.h), plus "lr" (the learning rate the
// trainer sets each step) and "checkpoint" (StepOptions::checkpoint).
#pragma once
#include <functional>
#include <string>

namespace tandem::trainer {

using OptionNames = std::function<std::string(const std::string& option, const std::string& value)>;

// The library's words: "StepOptions::<option>" or "StepOptions::<option> = <value>"; "lr" is
// "the learning rate".
std::string library_option_name(const std::string& option, const std::string& value);

// names(option, value), or the library's words when `names` is empty.
std::string option_name(const OptionNames& names, const std::string& option, const std::string& value = "");

}  // namespace tandem::trainer
