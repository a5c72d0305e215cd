// apps/trainer/memory.cpp: the memory ledger's prediction and measurements (see memory.h).
#include "apps/trainer/memory.h"

#include <algorithm>

#include "apps/trainer/ledger.h"  // defines: ledger_json
#include "apps/trainer/step.h"    // defines: Step
#include "core/out_of_memory.h"   // defines: human_bytes, available_memory
#include "core/storage.h"         // defines: memory_stats, reset_peak_memory

namespace tandem::trainer {

std::string memory_warning(double need, int64_t available, int sharing, Device device) {
  if (available < 0 || need * sharing <= static_cast<double>(available)) return "";
  std::string s = "warning: the memory ledger predicts " + human_bytes(need) + " more per rank for the model state";
  if (sharing > 1) s += " (x " + std::to_string(sharing) + " ranks on this machine = " + human_bytes(need * sharing) + ")";
  s += ", but " + human_bytes(static_cast<double>(available)) + " is available on " + device.str() +
       (device.is_cpu() ? " (MemAvailable)" : "") +
       ", and activations come on top: the run will likely run out of memory. Lower the batch size, compute in "
       "16-bit, or shard the optimizer state (ZeRO).";
  return s;
}

int ranks_sharing(Device device, int local_rank, int local_size) {
  if (device.is_cpu()) return local_size;
  const int gpus = std::max(cuda_device_count(), 1);
  int n = 0;
  for (int r = 0; r < local_size; ++r) n += r % gpus == local_rank % gpus;
  return n;
}

void MemoryMeter::plan(Step& step, Device device, int64_t data_bytes, int sharing) {
  device_ = device;
  const dist::LedgerOptions lo = step.ledger_options();
  mixed_ = lo.mixed;
  ledger_ = dist::predict_memory(lo);
  // What is not model state: everything held now except the parameters, the gradient buffers and
  // (AMP) the f32 masters and master gradients, which exist from set-up on, and the data batches,
  // which come and go (measure_state subtracts those held at its own moment).
  const int64_t held = step.model_state_bytes();
  other_ = memory_stats(device_).current_bytes - held - data_bytes;
  // What the model state still has to allocate, against what the device has left.
  const double need = std::max(0.0, ledger_.model_state() + ledger_.transient - static_cast<double>(held));
  warning_ = memory_warning(need, available_memory(device_), sharing, device_);
  reset_peak_memory(device_);  // the measured peak is the steps' (memory_ledger.h), not the set-up's
}

void MemoryMeter::measure_state(int64_t data_bytes) {
  if (ledger_.measured_state >= 0) return;
  ledger_.measured_state = memory_stats(device_).current_bytes - other_ - data_bytes;
}

void MemoryMeter::measure_peak() { ledger_.measured_peak = memory_stats(device_).peak_bytes - other_; }

nlohmann::json MemoryMeter::json() const { return ledger_json(ledger_, mixed_); }

}  // namespace tandem::trainer
