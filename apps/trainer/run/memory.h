// apps/trainer/run/memory.h: the memory ledger of a run - predicted (dist/memory_ledger.h) and measured.
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
// At plan() the prediction is also checked against what the device has left (core/storage.h
// available_memory: the CPU's MemAvailable, a GPU's free memory), times the ranks of this machine
// that share it: the model state still to be allocated (the optimizer state, AMP's master
// gradients, the transient buffers) beyond what is held already. When it does not fit, warning()
// says so, naming the figures and what to lower. A warning, not a refusal: the ledger counts the
// model state only (activations and workspace come on top, so a run can fail that the check
// passes), and it also over-predicts where memory is shared or reused (a ZeRO-2 bucket freed
// after the reduce-scatter, MemAvailable leaving out page cache the kernel would give back), so
// refusing would stop runs that fit; a warning at start-up still saves the epoch a late failure
// costs.
//
// Library workspaces are not model state (issue 18.7). The GPU once measured resnet18's model state
// at 165.9 MiB against 133.8 predicted (+24 %), and resnet50 AMP's at +8.3 %, while the CPU agreed
// exactly: both gaps are 32 MiB, the cuBLASLt workspace (core/ops/common/cuda/blas_handle.h,
// kBlasWorkspaceBytes), one persistent Storage block per GPU that the first GEMM allocates - after
// plan(), so measure_state() took it for model state. Not the allocator's rounding (current_bytes
// counts the bytes each tensor asked for), not cuDNN's workspaces (allocated and freed within each
// conv call), not the momentum buffers (per tensor, exactly the bytes predicted). The measurement
// was wrong, not the prediction: measure_state() makes sure the workspace exists (the first step's
// GEMMs allocated it anyway) and subtracts library_workspace_bytes(); the peak keeps it, as part of
// "activations, data batches, workspace and transients". tests/gpu_ledger.cpp holds the GPU to it.
//
// The memory budget (a trainer's flag, e.g. --memory-budget-mib): a hard limit, unlike the warning.
// The budgeted figure is the ledger's model state plus its transient gradient buffers
// (budgeted_bytes) - what the run is bound to hold, activations left out - agreed as the largest
// over the ranks (agreed_max: shards differ by padding, and every rank must refuse alike). The
// trainer checks it once the Step is built, before the first step allocates the optimizer state,
// and words the refusal; budget_refusal gives the sentence, with the figures of other layouts of the
// same model (predict_layout: another ZeRO stage, or TP's per-rank parameters over fewer DP ranks)
// named in the caller's words, those that fit first. Those figures are predictions from the
// current run's inputs: the bucket-based transient terms are kept (another stage) or scaled with
// the elements per rank (TP), and ZeRO-3's gathered units are left out (they depend on its unit
// schedule).
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
