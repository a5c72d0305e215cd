// apps/train/memory.cpp: the memory ledger's inputs and measurements (see memory.h).
#include "apps/train/memory.h"

#include <algorithm>

#include "apps/train/setup.h"  // defines: Training
#include "core/storage.h"      // defines: memory_stats

namespace tandem::apps {

void plan_memory(const TrainOptions& o, Training& t) {
  dist::LedgerOptions lo;
  int64_t grad_bytes = 0;
  for (auto& [name, p] : t.model->named_parameters())
    if (p.requires_grad()) lo.params += p.numel();
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
  lo.state_bytes = o.optimizer != "sgd" ? 8 : o.momentum != 0 ? 4 : 0;
  t.ledger = dist::predict_memory(lo);
  // What is not model state: everything held now except the parameters and gradient buffers.
  t.mem_other = memory_stats(t.dev).current_bytes - 4 * lo.params - grad_bytes;
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
          {"predicted_bytes", {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                               {"master_weights", m.masters}, {"model_state", m.model_state()},
                               {"transient", m.transient}}},
          {"measured_bytes", {{"model_state", m.measured_state}, {"peak", m.measured_peak},
                              {"activations_workspace_transient", m.measured_peak - m.measured_state}}}};
}

}  // namespace tandem::apps
