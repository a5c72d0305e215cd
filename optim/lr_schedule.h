// optim/lr_schedule.h: learning rate as a pure function of the step (testable, resumable).
//
//   warmup:  steps [0, warmup_steps): lr = base_lr * (warmup_start_factor + (1 - warmup_start_factor)
//            * step / warmup_steps)   - linear from base_lr*start_factor up towards base_lr
//            (Goyal et al. "ImageNet in 1 hour": warm up 5 epochs when the batch is large).
//   after warmup, with t = step:
//     Constant: lr = base_lr
//     Step:     lr = base_lr * gamma^k, k = number of milestones <= t
//               (torch MultiStepLR; ResNet's ImageNet recipe divides by 10 at epochs 30, 60, 80)
//     Cosine:   p = clamp((t - warmup_steps) / (total_steps - warmup_steps), 0, 1),
//               lr = min_lr + (base_lr - min_lr) * (1 + cos(pi p)) / 2   (SGDR without restarts)
//     Poly:     p as for Cosine, lr = min_lr + (base_lr - min_lr) * (1 - p)^power
//               (BERT's schedule: with warmup_start_factor 0 and power 1 it is Hugging Face's
//               get_polynomial_decay_schedule_with_warmup, lr_end = min_lr; power 1 = linear decay)
// Steps count optimizer updates; the apps convert epochs to steps (epoch * steps_per_epoch).
// A position may also be fractional (lr_at_position): a run resumed with another global batch is
// part-way through a step of the schedule's unit (apps/trainer/run/position.h says how the trainers
// measure it). Every formula above reads the position as a real number - warmup's fraction, the
// milestones passed (those <= position), the decay's p - so lr_at(opt, n) == lr_at_position(opt, n)
// bit for bit for every integer n (the integer form converts and calls the fractional one; doubles
// hold integers and their differences exactly below 2^53).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::optim {

enum class LrDecay { Constant, Step, Cosine, Poly };

struct LrScheduleOptions {
  double base_lr = 0.1;
  int64_t warmup_steps = 0;             // 0: no warmup
  double warmup_start_factor = 0.0;     // fraction of base_lr at step 0 of the warmup
  LrDecay decay = LrDecay::Constant;
  std::vector<int64_t> milestones;      // Step: absolute steps where lr *= gamma (ascending)
  double gamma = 0.1;                   // Step: the factor per milestone
  int64_t total_steps = 0;              // Cosine, Poly: the step where lr reaches min_lr (required > warmup)
  double min_lr = 0.0;                  // Cosine, Poly: the floor (HF's lr_end, whose default is 1e-7)
  double power = 1.0;                   // Poly: the exponent (HF's default, 1: linear)
};

double lr_at(const LrScheduleOptions& opt, int64_t step);
// The same at a fractional position >= 0, in the schedule's steps (not an overload of lr_at: an
// int argument would be ambiguous between int64_t and double).
double lr_at_position(const LrScheduleOptions& opt, double position);
// "constant", "step", "cosine", "poly" (for command lines); throws with the valid names otherwise.
LrDecay lr_decay_from_name(const std::string& name);

}  // namespace tandem::optim
