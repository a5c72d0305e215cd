// apps/train/memory.cpp: the memory ledger's inputs and measurements (see memory.h).
#include "apps/train/memory.h"

#include "apps/train/ledger.h"  // defines: ledger_inputs, model_state_bytes, ledger_json
#include "apps/train/setup.h"   // defines: Training
#include "core/storage.h"       // defines: memory_stats

namespace tandem::apps {

namespace {

// Bytes of data batches on the allocator that are not model state: what the loaders hold (prefetched
// batches, the resident batch) and the batch the step has in hand. A resident loader hands out its
// resident batch itself, which bytes_held() already counts. --cuda-graph also keeps a copy of the
// batch in the step's static input tensors (graph_step.h), allocated by the first step.
int64_t data_bytes(const Training& t, const data::Batch* in_hand) {
  int64_t held = t.train->bytes_held() + (t.val ? t.val->bytes_held() : 0);
  if (t.graph) held += t.graph->input_bytes();
  if (in_hand && !t.train->options().resident) held += data::batch_bytes(in_hand->images, in_hand->labels);
  return held;
}

}  // namespace

void plan_memory(const TrainOptions& o, Training& t) {
  dist::LedgerOptions lo = ledger_inputs(*t.ddp, t.zero.get(), t.world->size);
  lo.stage = o.zero;
  lo.mixed = t.amp != nullptr;  // 16-bit parameters and gradients, f32 masters (of the shard under ZeRO)
  lo.state_bytes = o.optimizer != "sgd" ? 8 : o.momentum != 0 ? 4 : 0;
  t.ledger = dist::predict_memory(lo);
  // What is not model state: everything held now except the parameters, the gradient buffers and
  // (AMP) the f32 masters and master gradients, which exist from set-up on, and the data batches,
  // which come and go (measure_memory subtracts those held at its own moment).
  t.mem_other = memory_stats(t.dev).current_bytes - model_state_bytes(*t.ddp, t.amp ? t.amp->master->bytes() : 0) -
                data_bytes(t, nullptr);
  // The measured peak is the steps' (memory_ledger.h), not the set-up's: building VGG-16 briefly
  // holds three classifier-sized temporaries (the initialisers), more than a ZeRO-2 step does.
  reset_peak_memory(t.dev);
}

void measure_memory(Training& t, const data::Batch& in_hand) {
  if (t.ledger.measured_state >= 0) return;
  t.ledger.measured_state = memory_stats(t.dev).current_bytes - t.mem_other - data_bytes(t, &in_hand);
}

void measure_peak(Training& t) { t.ledger.measured_peak = memory_stats(t.dev).peak_bytes - t.mem_other; }

nlohmann::json memory_json(const Training& t) { return ledger_json(t.ledger, t.amp != nullptr); }

}  // namespace tandem::apps
