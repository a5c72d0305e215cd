// core/graph_rng.h: random draws (dropout masks) inside a captured CUDA graph, PyTorch's scheme.
//
// The problem: a dropout kernel keys its mask by (seed, offset) from a Generator on the host. A
// captured graph freezes kernel arguments, so every replay would draw the mask of the captured step.
// The scheme (PyTorch's CUDAGeneratorImpl "philox offset extragraph/intragraph", adapted):
//   - capture: while a GraphRng records, Generator::draw(n, cuda) leaves the host offset alone
//     and returns {slot, relative offset}: the generator's row in a small device table (allocated
//     before the capture) and the counters this step drew from it so far. The kernel reads
//     seed = slot[0] and base = slot[1] and uses counter base + relative + i. The ledger notes how
//     many counters the step drew from each generator;
//   - replay: before_replay() enqueues, on the compute stream, one tiny kernel that writes each
//     generator's current (seed, offset) into its row (host values as kernel arguments of an eager
//     launch: no sync, no device read), then advances each host offset by the step's draws.
// So replay k draws exactly the counters the k-th eager step would have drawn (an eager step
// reserves them with advance() in the same order), the masks are bitwise equal, and the host
// generator holds, after N replays, the state N eager steps leave: a checkpoint written then is
// the same. The row write is stream-ordered after the previous replay and before this one, so one
// table serves every replay. Eager draws never touch any of this.
// Lifetime: the generators a capture drew from must outlive the GraphRng (it keeps pointers).
// Left out: attention's dropout (core/ops/attention/attention.cpp) still reserves with advance(), so a
// captured attention step would freeze its mask; train_imagenet's models have no attention.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem {

// The host bookkeeping of one capture, pure logic (tested on the CPU, tests/test_graph_rng.cpp).
class RngLedger {
 public:
  // 8 generators: a training step draws from one (default_generator); the bound only sizes the
  // device table, and exceeding it fails with a message.
  static constexpr int kMaxGenerators = 8;
  struct Take {
    int row;          // the generator's row in the slot table
    uint64_t offset;  // counters this capture drew from it before this draw
  };
  // Records that the captured step draws n counters from g.
  Take take(Generator& g, uint64_t n);
  // For each row, the state its slot must hold for the next replay; then advances each generator's
  // host offset by its draws in the step, as that many eager draws would.
  struct State {
    uint64_t seed, offset;
  };
  std::vector<State> next_replay();
  void clear() { rows_.clear(); }
  size_t generators() const { return rows_.size(); }
  uint64_t draws(const Generator& g) const;  // counters per step drawn from g (0: none)

 private:
  struct Row {
    Generator* gen;
    uint64_t used;
  };
  std::vector<Row> rows_;
};

class GraphRng {
 public:
  explicit GraphRng(int device);  // allocates the slot table on cuda:device (do it before capturing)
  ~GraphRng();
  GraphRng(const GraphRng&) = delete;
  GraphRng& operator=(const GraphRng&) = delete;

  // Runs `capture` (which calls StepGraph::capture) with this GraphRng recording the step's draws.
  // Only one GraphRng records at a time; an exception from `capture` is passed on.
  void record(const std::function<void()>& capture);
  // Before every replay of the recorded graph: write the slots, advance the host offsets.
  void before_replay();
  const RngLedger& ledger() const { return ledger_; }

  // Generator::draw's side, while a capture of `device` is open: the draw under the recording GraphRng.
  static RngDraw draw_captured(Generator& g, uint64_t n, int device);

 private:
  int device_;
  Tensor table_;  // [kMaxGenerators, 2] u64 (stored as i64): per row {seed, base offset}
  RngLedger ledger_;
};

}  // namespace tandem
