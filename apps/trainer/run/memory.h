// apps/trainer/run/memory.h: the memory ledger of a run - predicted (dist/memory_ledger.h) and measured.
// plan() predicts this rank's model-state bytes from the Step at set-up (and warns when they will not
// fit); measure_state() measures them once, after the first applied update; measure_peak() reads the
// steps' peak at the end; budget_refusal() words the memory budget's refusal.
// In full: apps/trainer/run/README.md ("memory.h in detail").
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"         // defines: Device
#include "dist/communicator.h"  // defines: Communicator
#include "dist/measure/memory_ledger.h"  // defines: MemoryLedger

namespace tandem::trainer {

class Step;

class MemoryMeter {
 public:
  // Predicts from `step` on `device`; `data_bytes`: batches the trainer's loaders hold now;
  // `sharing`: the ranks of this machine whose memory is the same as this rank's (its host's RAM
  // for the CPU, the GPU when ranks share one).
  void plan(Step& step, Device device, int64_t data_bytes, int sharing = 1);
  // Once (later calls do nothing): `data_bytes` held now, the batch in hand included.
  void measure_state(int64_t data_bytes);
  // Calls measure_state after `step`'s first applied update (a post-update hook, Step::add_post_update),
  // with what `data_bytes()` counts then, so neither loop asks. The hook holds this meter's address.
  void measure_at_first_update(Step& step, std::function<int64_t()> data_bytes);
  void measure_peak();
  const dist::MemoryLedger& ledger() const { return ledger_; }
  // The start-up check's line ("" when the prediction fits, or the available memory is unknown).
  const std::string& warning() const { return warning_; }
  nlohmann::json json() const;

 private:
  Device device_;
  dist::MemoryLedger ledger_;
  int64_t other_ = 0;  // allocator bytes at plan() that are neither model state nor data
  bool mixed_ = false;
  std::string warning_;
};

// The start-up check (see the file comment): "" when `need` more bytes per rank, times `sharing`
// ranks, fit into `available` bytes on `device` (or available < 0: unknown).
std::string memory_warning(double need, int64_t available, int sharing, Device device);
// The persistent library workspaces tandem holds on `device` (see the file comment), allocated now
// if they do not exist yet: the cuBLASLt workspace on a GPU (32 MiB), 0 on the CPU.
int64_t library_workspace_bytes(Device device);
// measure_state's arithmetic: allocator bytes now, minus what was there before the model state
// (other), the data batches held now, and the library workspaces.
int64_t measured_model_state(int64_t current, int64_t other, int64_t data_bytes, int64_t workspace);
// The budget (see the file comment): model state + transient gradient buffers, per rank.
double budgeted_bytes(const dist::MemoryLedger& m);
// The largest of `bytes` over the ranks of `control` (a CPU communicator over every rank of the
// job; collective).
double agreed_max(dist::Communicator& control, double bytes);
// The ledger of the same model laid out otherwise: ZeRO `stage` over `world` data-parallel ranks,
// with `params` trainable elements per rank (TP T: the replicated ones plus the split ones / T).
dist::MemoryLedger predict_layout(dist::LedgerOptions lo, int stage, int world, int64_t params);
// Another layout and its budgeted bytes; `name` is the caller's words for it ("--zero 3").
struct Layout {
  std::string name;
  double bytes = 0;
};
// "" when `bytes` fits `budget` (both bytes per rank); else a sentence naming the prediction and
// the budget (both in MiB), then the layouts of `others` that fit ("<name> predicts X MiB") or,
// when none does, the smallest of them. `run` names this run's layout, `budget_name` the budget.
std::string budget_refusal(double bytes, const dist::MemoryLedger& m, double budget, const std::string& run,
                           const std::string& budget_name, std::vector<Layout> others);

// The ranks of this machine that share `device`'s memory with this one: every local rank for the
// CPU, those that map to the same GPU (local_rank % device_count) for a GPU.
int ranks_sharing(Device device, int local_rank, int local_size);

}  // namespace tandem::trainer
