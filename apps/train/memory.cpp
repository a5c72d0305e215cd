// apps/train/memory.cpp: the memory ledger's inputs and measurements (see memory.h).
#include "apps/train/memory.h"

#include <algorithm>

#include "apps/train/setup.h"  // defines: Training
#include "core/storage.h"      // defines: memory_stats

namespace tandem::apps {

void plan_memory(const TrainOptions& o, Training& t) {
  dist::LedgerOptions lo;
  int64_t grad_bytes = 0, param_bytes = 0;
  for (auto& [name, p] : t.model->named_parameters())
    if (p.requires_grad()) lo.params += p.numel(), param_bytes += static_cast<int64_t>(p.nbytes());
  for (const dist::Bucket& b : t.ddp->reducer().buckets()) {
    const int64_t n = b.padded ? b.padded : b.buffer.numel();
    lo.next_bucket = std::max(lo.next_bucket, std::min(n, lo.largest_bucket));
    lo.largest_bucket = std::max(lo.largest_bucket, n);
    for (const Tensor& g : {b.buffer, b.shard})
      if (g.defined()) grad_bytes += static_cast<int64_t>(g.nbytes());
  }
  lo.shard_params = t.zero ? t.zero->layout().shard_numel() : -1;
  lo.world = t.world->size;
  lo.stage = o.zero;
  lo.mixed = t.amp != nullptr;  // 16-bit parameters and gradients, f32 masters (of the shard under ZeRO)
  lo.state_bytes = o.optimizer != "sgd" ? 8 : o.momentum != 0 ? 4 : 0;
  t.ledger = dist::predict_memory(lo);
  // What is not model state: everything held now except the parameters, the gradient buffers and
  // (AMP) the f32 masters and master gradients, which exist from set-up on.
  const int64_t master_bytes = t.amp ? t.amp->master->bytes() : 0;
  t.mem_other = memory_stats(t.dev).current_bytes - param_bytes - grad_bytes - master_bytes;
  // The measured peak is the steps' (memory_ledger.h), not the set-up's: building VGG-16 briefly
  // holds three classifier-sized temporaries (the initialisers), more than a ZeRO-2 step does.
  reset_peak_memory(t.dev);
}

void measure_memory(Training& t) {
  if (t.ledger.measured_state >= 0) return;
  t.ledger.measured_state = memory_stats(t.dev).current_bytes - t.mem_other;
}

void measure_peak(Training& t) { t.ledger.measured_peak = memory_stats(t.dev).peak_bytes - t.mem_other; }

nlohmann::json memory_json(const Training& t) {
  const dist::MemoryLedger& m = t.ledger;
  return {{"formula", m.formula},
          {"mixed_precision", t.amp != nullptr},  // K = 12 for Adam: f32 masters beside the f32 state
          {"predicted_bytes", {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                               {"master_weights", m.masters}, {"master_grads", m.master_grads},
                               {"model_state", m.model_state()},
                               {"transient", m.transient}}},
          {"measured_bytes", {{"model_state", m.measured_state}, {"peak", m.measured_peak},
                              {"activations_workspace_transient", m.measured_peak - m.measured_state}}}};
}

}  // namespace tandem::apps
