// dist/zero3.h: ZeRO-3's schedule - the module units, and when each one's parameters are gathered,
// prefetched and freed (dist/README.md, "ZeRO-3", draws it as a timeline).
//
// Under stage 3 (zero.h) rank r keeps only slice r of every bucket's parameters: shard(b), which the
// optimizer updates in place. The model's parameter tensors keep their TensorImpls, names and shapes,
// but their bytes are views into one buffer per bucket, its *gathered* storage, which holds bytes only
// while a unit needs them: all-gathered from the shards before, released after (Storage::release, so
// the views that autograd saved are freed too, and reacquired by the next gather).
//
// Units: a unit is a module whose parameters are gathered and freed together (FSDP's wrapped module).
// Zero3Options::wrap picks them, pre-order; a unit holds its subtree's parameters (units do not nest)
// and the root unit holds the rest. Default: every module with parameters held by a Sequential or a
// ModuleList - the repeated blocks (ResNet's blocks, VGG's and AlexNet's layers, BertLayers): one
// all-gather each, and only a few gathered at a time. The reducer's buckets are regrouped by unit
// (one per unit and dtype, BucketKey::unit), so a unit's gradients are reduce-scattered when its
// backward ends, as ZeRO-2's buckets are.
//
// One step (unit i is the i-th to run; `prefetch` = 1):
//   root's pre-hook (DDP's forward starts): gather the root and the pinned units; they stay until
//                the end of backward (the root's own layers run first and last)
//   pre-hook(i): gather i unless prefetched; start i+1's gather (the previous step's order); wait i
//   post-hook(i): free i; hook i's output, so that before i's backward (autograd's pre-backward hook):
//                gather i again, start i-1's gather, wait i
//   i's last gradient ready (grad-ready hook): free i      end of backward: free what is left
// A forward with grad mode off frees everything at the root's post-hook.
// Safety: the first step runs with every unit gathered (memory as ZeRO-2's) and records which units'
// hooks fired; a unit that was not seen before its forward (a parent runs its typed forward directly,
// or reads its weights itself) or before its backward stays pinned for the run: correct, coarser.
// Not seen at all: a unit's weights read after its post-hook by another unit (a weight tied across
// units): keep tied weights in one unit (the encoder's tied word embedding is the root's).
// Every rank must run the units in the same order (as FSDP): the gathers are collectives.
#pragma once
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "dist/ddp.h"
#include "dist/shard_layout.h"

namespace tandem::dist {

struct Zero3Options {
  // True: `m`, a child of `parent`, is a unit. Null: default_wrap.
  std::function<bool(const Module& m, const Module& parent)> wrap;
  // Units whose gathers start ahead of the one computing (forward: the next in execution order,
  // backward: the previous). 0: none, each unit waits for its own gather.
  int prefetch = 1;
};
bool default_wrap(const Module& m, const Module& parent);  // parent is a Sequential or a ModuleList

// Puts `ddp`'s reducer on reduce-scatter with one bucket per unit and dtype; returns the units' modules
// (unit 0: the root). Zero's stage-3 constructor calls it before laying out the shards.
std::vector<Module*> regroup_by_unit(DistributedDataParallel& ddp, const Zero3Options& options);

class Zero3Schedule {
 public:
  // shards[b]: this rank's slice of bucket b's parameters (from the parameters as they are now).
  // Points every parameter into its bucket's gathered storage (released) and hooks the units.
  Zero3Schedule(DistributedDataParallel& ddp, const ShardLayout& layout, std::vector<Tensor> shards,
                std::vector<Module*> units, const Zero3Options& options);
  ~Zero3Schedule();
  Zero3Schedule(const Zero3Schedule&) = delete;
  Zero3Schedule& operator=(const Zero3Schedule&) = delete;

  const Tensor& shard(size_t b) const { return shards_[b]; }
  size_t num_units() const { return units_.size(); }
  const std::vector<size_t>& order() const { return last_order_; }  // units in the last forward's order
  // Elements gathered at once after the first step: the root and pinned units, and the prefetch + 1
  // largest others (the memory ledger's working set).
  int64_t working_set() const;
  void hold(bool on);  // FullParameters

 private:
  struct Unit {
    std::vector<size_t> buckets;
    size_t params = 0, pending = 0;  // trainable parameters; those without a gradient yet this backward
    bool gathered = false;           // its buffers hold bytes (its gathers may still be in flight)
    std::vector<WorkPtr> works;      // gathers in flight
    bool pinned = true;              // gathered for the whole step: the root, and all until traced
    bool saw_forward = false, saw_backward = false;  // the first step's trace
    MarkPtr begin;                   // its compute started (timeline)
  };
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
  std::vector<Tensor> shards_;
  std::vector<std::shared_ptr<Storage>> gathered_;  // per bucket
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
  explicit FullParameters(Zero3Schedule* s) : s_(s) {
    if (s_) s_->hold(true);
  }
  FullParameters(FullParameters&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  ~FullParameters() {
    if (s_) s_->hold(false);
  }

 private:
  Zero3Schedule* s_;
};

}  // namespace tandem::dist
