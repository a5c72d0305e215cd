// optim/lr_schedule.cpp: see optim/lr_schedule.h for the formulas.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tandem::optim {

double lr_at(const LrScheduleOptions& opt, int64_t step) {
  TANDEM_CHECK(step >= 0, "lr_at: step must be >= 0, got ", step);
  return lr_at_position(opt, static_cast<double>(step));
}

double lr_at_position(const LrScheduleOptions& opt, double position) {
  TANDEM_CHECK(position >= 0, "lr_at: the position must be >= 0, got ", position);
  TANDEM_CHECK(opt.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", opt.warmup_steps);
  const double warmup = static_cast<double>(opt.warmup_steps);
  if (position < warmup) {
    double frac = position / warmup;
    return opt.base_lr * (opt.warmup_start_factor + (1.0 - opt.warmup_start_factor) * frac);
  }
  switch (opt.decay) {
    case LrDecay::Constant:
      return opt.base_lr;
    case LrDecay::Step: {
      TANDEM_CHECK(std::is_sorted(opt.milestones.begin(), opt.milestones.end()),
                   "lr schedule: step milestones must be in ascending order");
      // The milestones passed: those <= position (for an integer step, upper_bound's count).
      const auto k = std::count_if(opt.milestones.begin(), opt.milestones.end(),
                                   [&](int64_t m) { return static_cast<double>(m) <= position; });
      return opt.base_lr * std::pow(opt.gamma, static_cast<double>(k));
    }
    case LrDecay::Cosine:
    case LrDecay::Poly: {
      const bool cosine = opt.decay == LrDecay::Cosine;
      TANDEM_CHECK(opt.total_steps > opt.warmup_steps, "lr schedule: ", cosine ? "cosine" : "poly",
                   " decay needs total_steps (", opt.total_steps, ") > warmup_steps (", opt.warmup_steps, ")");
      double p = (position - warmup) / static_cast<double>(opt.total_steps - opt.warmup_steps);
      p = std::clamp(p, 0.0, 1.0);
      if (cosine) return opt.min_lr + (opt.base_lr - opt.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
      TANDEM_CHECK(opt.power > 0, "lr schedule: poly decay needs power > 0, got ", opt.power);
      return opt.min_lr + (opt.base_lr - opt.min_lr) * std::pow(1.0 - p, opt.power);
    }
  }
  TANDEM_THROW("lr schedule: unknown decay kind");
}

LrDecay lr_decay_from_name(const std::string& name) {
  if (name == "constant") return LrDecay::Constant;
  if (name == "step") return LrDecay::Step;
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "poly") return LrDecay::Poly;
  TANDEM_THROW("unknown lr schedule \"", name, "\"; valid names are: constant, step, cosine, poly");
}

}  // namespace tandem::optim
