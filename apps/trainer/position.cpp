// apps/trainer/position.cpp: a run's position to and from a checkpoint's TrainState (see position.h).
#include "apps/trainer/position.h"

#include "core/random.h"  // defines: default_generator

namespace tandem::trainer {

TrainState train_state(const Position& p, int world_size, const std::string& model) {
  TrainState s;
  s.step = p.step;
  s.epoch = s.sampler_epoch = p.epoch;
  s.index_in_epoch = p.index_in_epoch;
  s.world_size = world_size;
  s.model = model;
  s.rng["default"] = {default_generator().seed(), default_generator().offset()};
  return s;
}

Position resume_position(const TrainState& s) {
  if (auto it = s.rng.find("default"); it != s.rng.end()) default_generator().set_state(it->second.seed, it->second.offset);
  return Position{s.step, s.epoch, s.index_in_epoch};
}

}  // namespace tandem::trainer
