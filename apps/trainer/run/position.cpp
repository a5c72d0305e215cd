// apps/trainer/run/position.cpp: a run's position to and from a checkpoint's TrainState, and its length
// in samples (see position.h).
#include "apps/trainer/run/position.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"   // defines: TANDEM_CHECK
#include "core/random.h"  // defines: default_generator

namespace tandem::trainer {

TrainState train_state(const Position& p, int world_size, int64_t global_batch, const std::string& model) {
  TrainState s;
  s.step = p.step;
  s.epoch = s.sampler_epoch = p.epoch;
  s.epoch_offset = p.epoch_offset;
  s.samples = p.samples;
  s.global_batch = global_batch;
  s.world_size = world_size;
  s.model = model;
  s.rng["default"] = {default_generator().seed(), default_generator().offset()};
  return s;
}

Position resume_position(const TrainState& s, int64_t global_batch) {
  if (auto it = s.rng.find("default"); it != s.rng.end()) default_generator().set_state(it->second.seed, it->second.offset);
  // Samples unknown: -1 (a format-1 file without its batch), or 0 after steps (format-2 files that
  // apps wrote before they counted samples). Every step took a full global batch: the file's when
  // it says, else today's.
  const bool known = s.samples > 0 || (s.samples == 0 && s.step == 0);
  const int64_t samples = known ? s.samples : s.step * (s.global_batch > 0 ? s.global_batch : global_batch);
  return Position{s.step, s.epoch, s.epoch_offset, samples};
}

double RunLength::unit_steps_per_epoch() const {
  if (by_epochs()) return static_cast<double>(steps_per_epoch);
  // Exact (spe itself) while G is the fresh start's.
  return global_batch == unit_batch ? static_cast<double>(steps_per_epoch)
                                    : std::round(static_cast<double>(steps_per_epoch * global_batch) / unit_batch);
}

int64_t RunLength::unit_steps(int64_t fresh_steps, int64_t fresh_global_batch) const {
  const int64_t unit = by_epochs() ? global_batch : unit_batch;
  if (fresh_global_batch == unit) return fresh_steps;
  return std::llround(static_cast<double>(fresh_steps) * fresh_global_batch / unit);
}

int64_t RunLength::schedule_total() const {
  return by_epochs() ? epochs * steps_per_epoch : total_samples / unit_batch;
}

double RunLength::schedule_position(const Position& p) const {
  if (!by_epochs()) return static_cast<double>(p.samples) / static_cast<double>(unit_batch);
  const double in_epoch = std::min(static_cast<double>(p.epoch_offset) / static_cast<double>(global_batch),
                                   static_cast<double>(steps_per_epoch));
  return static_cast<double>(p.epoch * steps_per_epoch) + in_epoch;
}

bool RunLength::done(const Position& p) const {
  return by_epochs() ? p.epoch >= epochs : p.samples >= total_samples;
}

int64_t RunLength::steps_left(const Position& p, int64_t left_in_epoch) const {
  if (done(p)) return 0;
  if (by_epochs()) return left_in_epoch + (epochs - p.epoch - 1) * steps_per_epoch;
  return (total_samples - p.samples + global_batch - 1) / global_batch;
}

}  // namespace tandem::trainer
