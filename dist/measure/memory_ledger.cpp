// dist/measure/memory_ledger.cpp: the ZeRO paper's per-rank bytes (see memory_ledger.h).
#include "dist/measure/memory_ledger.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"

namespace tandem::dist {

MemoryLedger predict_memory(const LedgerOptions& o) {
  TANDEM_CHECK(o.stage >= 0 && o.stage <= 3 && o.world >= 1, "predict_memory: stage 0..3 and world >= 1");
  const double psi = static_cast<double>(o.params);
  const double shard = o.shard_params >= 0 ? static_cast<double>(o.shard_params) : psi / o.world;
  const double low = o.mixed ? 2 : 4;  // bytes of a parameter / gradient element
  const double k = o.mixed ? 4 + o.state_bytes : o.state_bytes;  // + f32 masters under AMP
  MemoryLedger m;
  m.params = low * (o.stage == 3 ? shard : psi);
  m.grads = low * (o.stage >= 2 ? shard : psi);
  m.gathered = o.stage == 3 ? low * static_cast<double>(o.gathered) : 0;
  const double state_elems = o.stage == 0 ? psi : shard;
  m.master_grads = o.mixed ? 4 * state_elems : 0;  // one f32 gradient per master
  m.optimizer = o.state_bytes * state_elems;
  m.masters = o.mixed ? 4 * state_elems : 0;
  m.transient = low * static_cast<double>(o.largest_bucket + (o.stage >= 2 ? o.next_bucket : 0));
  if (o.mixed && o.cpu_widen) {  // f32 copies of the 16-bit CPU kernels (memory_ledger.h)
    m.transient += 4 * static_cast<double>(o.largest_param);
    if (o.stage < 2 && o.world > 1) m.transient = std::max(m.transient, 8 * static_cast<double>(o.largest_bucket));
  }
  const auto term = [](double c, bool per_n) {
    char b[32];
    std::snprintf(b, sizeof b, "%g%s", c, per_n ? "Ψ/N" : "Ψ");
    return std::string(b);
  };
  m.formula = term(low, o.stage == 3) + " + " + term(low, o.stage >= 2) + " + " + term(k, o.stage > 0);
  if (o.mixed) m.formula += " (+ " + term(4, o.stage > 0) + " f32 master grads)";
  // Tensor parallelism: the same formulas over the N data-parallel ranks, Ψ being this rank's shards.
  if (o.tp > 1) m.formula += ", Ψ = this rank's TP shards of " + std::to_string(o.tp);
  return m;
}

std::string MemoryLedger::str() const {
  const auto mb = [](double b) { return b / (1 << 20); };
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "memory per rank (predicted, %s): params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, master "
                "weights %.1f MiB = %.1f MiB; transient gradients %.1f MiB",
                formula.c_str(), mb(params), mb(grads), mb(optimizer), mb(masters), mb(model_state()), mb(transient));
  std::string s = buf;
  if (gathered > 0) {
    std::snprintf(buf, sizeof buf, "; ZeRO-3 gathered units %.1f MiB during a step", mb(gathered));
    s += buf;
  }
  if (master_grads > 0) {
    std::snprintf(buf, sizeof buf, " (model state includes f32 master grads of %.1f MiB)", mb(master_grads));
    s += buf;
  }
  if (measured_state >= 0) {
    std::snprintf(buf, sizeof buf, "\nmemory per rank (measured): model state %.1f MiB (%+.1f%% vs predicted), peak "
                  "%.1f MiB (activations, data batches, workspace and transients %.1f MiB)",
                  mb(static_cast<double>(measured_state)), 100.0 * (measured_state / model_state() - 1),
                  mb(static_cast<double>(measured_peak)), mb(static_cast<double>(measured_peak - measured_state)));
    s += buf;
  }
  return s;
}

}  // namespace tandem::dist
