// apps/trainer/run/memory.cpp: the memory ledger's prediction and measurements (see memory.h).
#include "apps/trainer/run/memory.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "apps/trainer/step/ledger.h"  // defines: ledger_json
#include "apps/trainer/step/step.h"    // defines: Step
#include "core/out_of_memory.h"   // defines: human_bytes, available_memory
#include "core/storage.h"         // defines: memory_stats, reset_peak_memory
#ifdef TANDEM_WITH_CUDA
#include "core/ops/common/cuda/blas_handle.h"  // defines: blas_workspace, kBlasWorkspaceBytes
#endif

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

int64_t library_workspace_bytes(Device device) {
#ifdef TANDEM_WITH_CUDA
  if (device.is_cuda()) {
    cuda::blas_workspace();  // the current device's (the trainers' GPU); exists after any GEMM
    return static_cast<int64_t>(cuda::kBlasWorkspaceBytes);
  }
#endif
  (void)device;
  return 0;
}

int64_t measured_model_state(int64_t current, int64_t other, int64_t data_bytes, int64_t workspace) {
  return current - other - data_bytes - workspace;
}

void MemoryMeter::measure_at_first_update(Step& step, std::function<int64_t()> data_bytes) {
  step.add_post_update([this, data_bytes = std::move(data_bytes)] {
    if (ledger_.measured_state < 0) measure_state(data_bytes());
  });
}

void MemoryMeter::measure_state(int64_t data_bytes) {
  if (ledger_.measured_state >= 0) return;
  const int64_t workspace = library_workspace_bytes(device_);  // first: it may allocate
  ledger_.measured_state = measured_model_state(memory_stats(device_).current_bytes, other_, data_bytes, workspace);
}

void MemoryMeter::measure_peak() { ledger_.measured_peak = memory_stats(device_).peak_bytes - other_; }

nlohmann::json MemoryMeter::json() const { return ledger_json(ledger_, mixed_); }

double budgeted_bytes(const dist::MemoryLedger& m) { return m.model_state() + m.transient; }

double agreed_max(dist::Communicator& control, double bytes) {
  // One slot per rank, each rank writing its own (the communicators sum or average, no max).
  std::vector<double> slots(static_cast<size_t>(control.size()), 0.0);
  slots[static_cast<size_t>(control.rank())] = bytes;
  Tensor t = Tensor::from_vector_f64(slots, {static_cast<int64_t>(control.size())}, DType::F64);
  control.all_reduce(t, dist::ReduceOp::Sum, "memory budget")->wait();
  const std::vector<double> all = t.to_vector_f64();
  return *std::max_element(all.begin(), all.end());
}

dist::MemoryLedger predict_layout(dist::LedgerOptions lo, int stage, int world, int64_t params) {
  // Fewer elements per rank (TP) shrink the buckets and the largest parameter alike, to first order.
  if (lo.params > 0 && params != lo.params) {
    const double f = static_cast<double>(params) / static_cast<double>(lo.params);
    for (int64_t* n : {&lo.largest_bucket, &lo.next_bucket, &lo.largest_param})
      *n = static_cast<int64_t>(static_cast<double>(*n) * f);
  }
  lo.stage = stage;
  lo.world = world;
  lo.params = params;
  lo.shard_params = -1;  // Ψ / N: no real layout to read the padding from
  lo.gathered = 0;
  return dist::predict_memory(lo);
}

namespace {
std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1 << 20));
  return b;
}
}  // namespace

std::string budget_refusal(double bytes, const dist::MemoryLedger& m, double budget, const std::string& run,
                           const std::string& budget_name, std::vector<Layout> others) {
  if (bytes <= budget) return "";
  std::string s = "the memory ledger predicts " + mib(bytes) + " per rank for " + run + " (model state " +
                  mib(m.model_state()) + " + transient gradients " + mib(m.transient) + "), over " + budget_name +
                  " (" + mib(budget) + ")";
  std::stable_sort(others.begin(), others.end(), [](const Layout& a, const Layout& b) { return a.bytes < b.bytes; });
  std::vector<std::string> fit;
  for (const Layout& l : others)
    if (l.bytes <= budget) fit.push_back(l.name + " predicts " + mib(l.bytes));
  if (!fit.empty()) {
    s += ": ";
    for (size_t i = 0; i < fit.size(); ++i) s += (i == 0 ? "" : i + 1 == fit.size() ? " or " : ", ") + fit[i];
    s += ", which fit" + std::string(fit.size() == 1 ? "s" : "");
  } else if (!others.empty()) {
    s += "; the smallest other layout, " + others.front().name + ", predicts " + mib(others.front().bytes) +
         ", which does not fit either: use more ranks, a smaller model or a larger budget";
  }
  return s + " (activations come on top of these figures)";
}

}  // namespace tandem::trainer
