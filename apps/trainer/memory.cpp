// apps/trainer/memory.cpp: the memory ledger's prediction and measurements (see memory.h).
#include "apps/trainer/memory.h"

#include "apps/trainer/ledger.h"  // defines: ledger_json
#include "apps/trainer/step.h"    // defines: Step
#include "core/storage.h"         // defines: memory_stats, reset_peak_memory

namespace tandem::trainer {

void MemoryMeter::plan(Step& step, Device device, int64_t data_bytes) {
  device_ = device;
  const dist::LedgerOptions lo = step.ledger_options();
  mixed_ = lo.mixed;
  ledger_ = dist::predict_memory(lo);
  // What is not model state: everything held now except the parameters, the gradient buffers and
  // (AMP) the f32 masters and master gradients, which exist from set-up on, and the data batches,
  // which come and go (measure_state subtracts those held at its own moment).
  other_ = memory_stats(device_).current_bytes - step.model_state_bytes() - data_bytes;
  reset_peak_memory(device_);  // the measured peak is the steps' (memory_ledger.h), not the set-up's
}

void MemoryMeter::measure_state(int64_t data_bytes) {
  if (ledger_.measured_state >= 0) return;
  ledger_.measured_state = memory_stats(device_).current_bytes - other_ - data_bytes;
}

void MemoryMeter::measure_peak() { ledger_.measured_peak = memory_stats(device_).peak_bytes - other_; }

nlohmann::json MemoryMeter::json() const { return ledger_json(ledger_, mixed_); }

}  // namespace tandem::trainer
