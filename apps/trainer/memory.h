// apps/trainer/memory.h: the memory ledger of a run - predicted (dist/memory_ledger.h) and measured.
//
// plan() (end of a trainer's set-up) predicts this rank's bytes from the Step (parameters, the
// strategy's gradient buffers and shards, the optimizer's state, AMP's f32 masters: ledger.h) and
// notes what the allocator already holds beside the model state (data sets, loaders, the corpus),
// so measure_state() can subtract it. A resumed run already holds its optimizer state at plan():
// it is model state (Step::model_state_bytes counts it), not "other". measure_state() runs once, after the first applied step
// (the optimizer state exists from then on): current bytes minus that, minus the data batches held
// at that moment, are the model state (plus the step's last outputs, a few KiB). Data batches are
// the trainer's to count (data_bytes): a loader's prefetched and resident batches, the batch in
// hand, a CUDA graph's static copy of it - up to prefetch + 2 batches, 4.5 MiB against
// resnet_tiny's 3.6 MiB of state in train_imagenet's default job, 77 MiB per batch at ResNet-50's
// 128 x 224^2. measure_peak() reads the steps' peak at the end of the run (the peak is reset at
// plan(): building VGG-16 briefly holds three classifier-sized temporaries, the initialisers, more
// than a ZeRO-2 step does). The trainers print ledger().str() at start-up and in the summary, and
// write json() into their metrics as "memory_ledger".
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/device.h"         // defines: Device
#include "dist/measure/memory_ledger.h"  // defines: MemoryLedger

namespace tandem::trainer {

class Step;

class MemoryMeter {
 public:
  // Predicts from `step` on `device`; `data_bytes`: batches the trainer's loaders hold now.
  void plan(Step& step, Device device, int64_t data_bytes);
  // Once (later calls do nothing): `data_bytes` held now, the batch in hand included.
  void measure_state(int64_t data_bytes);
  void measure_peak();
  const dist::MemoryLedger& ledger() const { return ledger_; }
  nlohmann::json json() const;

 private:
  Device device_;
  dist::MemoryLedger ledger_;
  int64_t other_ = 0;  // allocator bytes at plan() that are neither model state nor data
  bool mixed_ = false;
};

}  // namespace tandem::trainer
