// core/graph_rng.cpp: the capture ledger and the slot table (see graph_rng.h).
#include "core/graph_rng.h"

#include <atomic>

#include "core/check.h"
#include "core/graph_capture.h"  // defines: graph_capture::active
#ifdef TANDEM_WITH_CUDA
#include "core/ops/graph_scalars/kernels.h"
#endif

namespace tandem {
namespace {
// The GraphRng recording now (one at a time; only the capturing thread draws under it).
std::atomic<GraphRng*> g_recording{nullptr};
}  // namespace

// Generator::draw (core/random.h) lives here, beside the capture path it chooses, so that random.cpp
// (the eager draws) does not include the graph machinery that is built on it.
RngDraw Generator::draw(uint64_t n, const Device& device) {
  // One atomic load per eager draw.
  if (device.is_cuda() && graph_capture::active(device.index)) return GraphRng::draw_captured(*this, n, device.index);
  return {seed_, advance(n), nullptr};
}

RngLedger::Take RngLedger::take(Generator& g, uint64_t n) {
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (rows_[r].gen != &g) continue;
    const uint64_t o = rows_[r].used;
    rows_[r].used += n;
    return {static_cast<int>(r), o};
  }
  TANDEM_CHECK(static_cast<int>(rows_.size()) < kMaxGenerators, "a captured CUDA graph step draws random numbers from "
               "more than ", kMaxGenerators, " generators; share one generator between the dropout layers (the "
               "models do: default_generator())");
  rows_.push_back({&g, n});
  return {static_cast<int>(rows_.size()) - 1, 0};
}

std::vector<RngLedger::State> RngLedger::next_replay() {
  std::vector<State> states;
  states.reserve(rows_.size());
  for (Row& r : rows_) {
    states.push_back({r.gen->seed(), r.gen->offset()});
    r.gen->advance(r.used);  // what the eager step's draws would have reserved, in total
  }
  return states;
}

uint64_t RngLedger::draws(const Generator& g) const {
  for (const Row& r : rows_)
    if (r.gen == &g) return r.used;
  return 0;
}

GraphRng::GraphRng(int device) : device_(device) {
  table_ = Tensor::zeros({RngLedger::kMaxGenerators, 2}, DType::I64, Device::cuda(device));
}

GraphRng::~GraphRng() {
  GraphRng* self = this;
  g_recording.compare_exchange_strong(self, nullptr);
}

void GraphRng::record(const std::function<void()>& capture) {
  GraphRng* none = nullptr;
  TANDEM_CHECK(g_recording.compare_exchange_strong(none, this),
               "GraphRng::record: another GraphRng is already recording a capture; captures cannot be nested");
  ledger_.clear();
  try {
    capture();
  } catch (...) {
    g_recording = nullptr;
    throw;
  }
  g_recording = nullptr;
}

void GraphRng::before_replay() {
  const std::vector<RngLedger::State> states = ledger_.next_replay();
  if (states.empty()) return;  // the step draws nothing: no launch
#ifdef TANDEM_WITH_CUDA
  kernels::RngSlotRows rows;
  static_assert(kernels::RngSlotRows::kMax == RngLedger::kMaxGenerators, "one bound for the table and its writes");
  rows.rows = static_cast<int>(states.size());
  for (size_t r = 0; r < states.size(); ++r) {
    rows.values[2 * r] = states[r].seed;
    rows.values[2 * r + 1] = states[r].offset;
  }
  kernels::rng_slots_write_cuda(table_, rows);
#else
  TANDEM_THROW("GraphRng::before_replay in a build without CUDA");
#endif
}

RngDraw GraphRng::draw_captured(Generator& g, uint64_t n, int device) {
  GraphRng* rec = g_recording.load();
  TANDEM_CHECK(rec != nullptr, "a kernel draws random numbers (dropout) inside a CUDA graph capture of cuda:", device,
               ", but no GraphRng records it, so every replay would reuse the captured mask. Capture through "
               "GraphRng::record (core/graph_rng.h), as apps/trainer/step/graph_capture.cpp does");
  TANDEM_CHECK(rec->device_ == device, "the recording GraphRng's slots are on cuda:", rec->device_,
               " but the captured draw is on cuda:", device, "; make the GraphRng on the capturing device");
  const RngLedger::Take t = rec->ledger_.take(g, n);
  const auto* table = static_cast<const uint64_t*>(rec->table_.data_ptr());
  return {0, t.offset, table + 2 * t.row};
}

}  // namespace tandem
