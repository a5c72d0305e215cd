// apps/trainer/step/ledger.cpp: the memory ledger's shared inputs (see ledger.h).
#include "apps/trainer/step/ledger.h"

#include <algorithm>

namespace tandem::trainer {

dist::LedgerOptions ledger_inputs(dist::DistributedDataParallel& ddp, const dist::Zero* zero, int world) {
  dist::LedgerOptions lo;
  for (auto& [name, p] : ddp.module().named_parameters()) {
    if (!p.requires_grad()) continue;
    lo.params += p.numel();
    lo.largest_param = std::max(lo.largest_param, p.numel());
    lo.cpu_widen = !p.is_cuda();  // applies under AMP only (memory_ledger.h)
  }
  for (const dist::Bucket& b : ddp.reducer().buckets()) {
    const int64_t n = b.padded ? b.padded : b.buffer.numel();
    lo.next_bucket = std::max(lo.next_bucket, std::min(n, lo.largest_bucket));
    lo.largest_bucket = std::max(lo.largest_bucket, n);
  }
  lo.shard_params = zero ? zero->layout().shard_numel() : -1;
  lo.world = world;
  lo.stage = zero ? zero->stage() : 0;
  if (zero && zero->schedule()) lo.gathered = dist::zero3_working_set(*zero->schedule());
  return lo;
}

int64_t model_state_bytes(dist::DistributedDataParallel& ddp, const dist::Zero* zero, int64_t extra) {
  int64_t bytes = extra;
  if (const dist::Zero3Schedule* s = zero ? zero->schedule() : nullptr)
    for (size_t b = 0; b < zero->layout().buckets().size(); ++b) bytes += static_cast<int64_t>(s->shard(b).nbytes());
  else
    for (auto& [name, p] : ddp.module().named_parameters())
      if (p.requires_grad()) bytes += static_cast<int64_t>(p.nbytes());
  for (const dist::Bucket& b : ddp.reducer().buckets())
    for (const Tensor& g : {b.buffer, b.shard})
      if (g.defined()) bytes += static_cast<int64_t>(g.nbytes());
  return bytes;
}

nlohmann::json ledger_json(const dist::MemoryLedger& m, bool mixed) {
  return {{"formula", m.formula},
          {"mixed_precision", mixed},
          {"predicted_bytes", {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                               {"master_weights", m.masters}, {"master_grads", m.master_grads},
                               {"model_state", m.model_state()},
                               {"transient", m.transient}}},
          {"measured_bytes", {{"model_state", m.measured_state}, {"peak", m.measured_peak},
                              {"activations_workspace_transient", m.measured_peak - m.measured_state}}}};
}

}  // namespace tandem::trainer
