// dist/zero3.h: ZeRO-3's schedule - the module units, and when each one's parameters are gathered,
// prefetched and freed. dist/README.md, "ZeRO-3", draws one step of it and says why.
//
// Rank r keeps slice r of every bucket's parameters (shard(b), updated in place by the optimizer).
// The parameter tensors keep their TensorImpls, names and shapes, but their bytes are views into one
// buffer per bucket (full(b)) that holds bytes only while its unit is in use: all-gathered from the
// shards before, released after (Storage::release: autograd's saved views of it are freed too).
// A unit is a module whose parameters are gathered and freed together (FSDP's wrapped module):
// Zero3Options::wrap picks them in pre-order, a unit holds its subtree's parameters (units do not
// nest) and the root unit the rest; the reducer's buckets are regrouped so that none spans two.
// Hooks gather a unit before its forward and its backward (prefetching the next units) and free it
// after each; the root and pinned units stay gathered from DDP's forward to the end of backward.
// The first step keeps all gathered and pins the units whose hooks missed it (the README: safety).
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "dist/ddp.h"
#include "dist/shard_layout.h"

namespace tandem::dist {

struct Zero3Options {
  // True: `m`, a child of `parent`, is a unit. Default: parent is a Sequential or a ModuleList.
  std::function<bool(const Module& m, const Module& parent)> wrap = [](const Module&, const Module& parent) {
    return parent.type_name() == "Sequential" || parent.type_name() == "ModuleList";
  };
  // Units whose gathers start ahead of the one computing (forward: the next in execution order,
  // backward: the previous). 0: none, each unit waits for its own gather.
  int prefetch = 1;
};

// The unit of each of `root`'s parameters, in named_parameters() order (0: the root unit, which stays
// gathered from the forward to the end of backward), and the units' modules in `units` when given.
// What Zero3Schedule gathers together; the what-if model reads the root's share from it.
std::vector<size_t> unit_of_parameters(Module& root, const Zero3Options& options, std::vector<Module*>* units = nullptr);

// Puts `ddp`'s reducer on reduce-scatter with buckets that never span two units (one per unit, dtype
// and run of consecutive parameters); returns `ddp`. Zero's stage-3 constructor calls it first.
DistributedDataParallel& regroup_by_unit(DistributedDataParallel& ddp, const Zero3Options& options);

class Zero3Schedule {
 public:
  // shards[b]: this rank's slice of bucket b's parameters (from the parameters as they are now).
  // Points every parameter into its bucket's gathered storage (released) and hooks the units.
  // Not movable: the hooks hold `this`. A gather in flight at its end keeps its tensors alive itself.
  Zero3Schedule(DistributedDataParallel& ddp, const ShardLayout& layout, std::vector<Tensor> shards,
                const Zero3Options& options);
  Zero3Schedule(Zero3Schedule&&) = delete;

  struct Unit {
    std::vector<size_t> buckets;     // its parameters' buckets (the reducer's and the layout's indices)
    size_t params = 0, pending = 0;  // trainable parameters; those without a gradient yet this backward
    bool gathered = false;           // its buffers hold bytes (its gathers may still be in flight)
    std::vector<WorkPtr> works;      // gathers in flight
    bool pinned = true;              // gathered for the whole step: the root, and all until traced
    bool saw_forward = false, saw_backward = false;  // the first step's trace
    MarkPtr begin;                   // its compute started (timeline)
  };
  const std::vector<Unit>& units() const { return units_; }  // unit 0: the root
  const Tensor& shard(size_t b) const { return shards_[b]; }
  const Tensor& full(size_t b) const { return full_[b]; }  // bucket b gathered (bytes only while in use)
  const std::vector<size_t>& order() const { return last_order_; }  // units in the last forward's order
  size_t prefetch() const { return prefetch_; }
  bool traced() const { return traced_; }
  void hold(bool on);  // FullParameters

 private:
  void before_forward(size_t u);
  void after_forward(size_t u, const Tensor& out);
  void begin_backward();  // queues end_backward, once per backward
  void before_backward(size_t u);
  void on_grad_ready(size_t u);
  void end_backward();
  void gather(size_t u);
  void wait(size_t u, bool backward);
  void free(size_t u);
  void free_all();

  Communicator& comm_;
  Timeline& timeline_;
  std::vector<Tensor> shards_, full_;  // per bucket: this rank's slice, the gathered bucket (mostly released)
  std::vector<Unit> units_;
  size_t prefetch_;
  std::vector<size_t> order_, last_order_;  // units in forward order: this step's, the previous one's
  bool traced_ = false, in_backward_ = false;
  int held_ = 0;  // FullParameters alive
  std::vector<autograd::HookHandle> hooks_, backward_hooks_;
  std::vector<GradReadyHookHandle> grad_hooks_;
};

// While alive, every parameter is whole on every rank (stage 3: all gathered and kept; stages 1, 2:
// always whole). For a checkpoint's weights or a direct look at them. Collective, like its end.
class FullParameters {
 public:
  explicit FullParameters(Zero3Schedule* s) : s_(s) { if (s_) s_->hold(true); }
  FullParameters(FullParameters&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  ~FullParameters() { if (s_) s_->hold(false); }

 private:
  Zero3Schedule* s_;
};

// The elements gathered at once (the memory ledger's LedgerOptions::gathered, measure/): the root's
// and the pinned units' (gathered for the whole step; before the first step's trace, only the root
// counts as pinned) and the prefetch + 1 largest other units'.
int64_t zero3_working_set(const Zero3Schedule& schedule);

}  // namespace tandem::dist
