// dist/reducer.h: averages gradients across ranks while backward is still running.
//
// The heart of data parallelism. At construction the parameters are grouped into buckets
// (bucketing.h decides which), each one flat buffer that every .grad is a view into (under
// all-reduce; bucket_collective.h says what reduce-scatter does instead). During backward:
//   1. autograd fires a parameter's grad-ready hook when its gradient is complete;
//   2. the hook decrements its bucket's pending count; at zero the bucket is ready;
//   3. ready buckets are launched strictly in index order (a bucket that is ready early waits for
//      the ones before it), because every rank must issue the same all-reduces in the same order
//      or the collectives would pair up different buckets across ranks;
//   4. a launch hands the bucket to its BucketCollective (bucket_collective.h): an all-reduce
//      (DDP, ZeRO-1) or a reduce-scatter into this rank's shard (ZeRO-2). NCCL runs it on the comm
//      stream after an event recorded on the compute stream, MPI on its communication thread;
//   5. when backward ends (autograd::queue_callback), the reducer checks for unused parameters,
//      waits for every bucket and averages (on a GPU "waits" is a stream wait: the host never
//      blocks), and records the step's timing.
//
// What it leaves out: rebuilding buckets from the observed order (PyTorch does this after the first
// iteration), static-graph optimisations, and gradients of sparse or non-contiguous parameters.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/bucket_collective.h"
#include "dist/measure/timeline.h"

namespace tandem::dist {

struct ReducerOptions {
  BucketingOptions bucketing;           // 1 MiB first bucket, 25 MiB after (bucketing.h)
  bool bucketed = true;                 // false: one all-reduce per parameter (baseline)
  bool overlap = true;                  // false: all-reduces start after backward ends (baseline)
  Compression compression = Compression::None;  // dtype of gradients on the wire
  // Parameters that get no gradient in a backward: true marks them ready (their gradient counts as
  // zero); false (default, as PyTorch) fails with their names, since a bucket that never fills
  // would stall every rank. Detection is at the end of backward, so buckets holding unused
  // parameters launch late - put such parameters early in registration order, or turn this off.
  bool find_unused_parameters = false;
  Collective collective = Collective::AllReduce;  // ReduceScatter: ZeRO-2 (bucket_collective.h); no compression
  // ReduceScatter: how many launched buckets may still hold their full buffer while backward goes on.
  // When backward outruns the network (CPU ranks sharing cores), every bucket would otherwise be
  // alive at the end of backward - the whole 4Ψ of gradients ZeRO-2 exists to avoid. 1 (default)
  // keeps one reduce-scatter overlapping the next layer's backward; 0 waits for each at its launch.
  int scatter_in_flight = 1;
  std::vector<size_t> units;  // ZeRO-3: per parameter, its BucketKey::unit (zero3.h); empty: all 0
};

// Where a parameter's gradient lives.
struct VariableLocator {
  size_t bucket = 0;  // index into buckets()
  size_t index = 0;   // position within that bucket's params/offsets/lengths
};

class Reducer {
 public:
  // named_params: the parameters that require grad, in registration order.
  Reducer(std::vector<NamedParam> named_params, Communicator& comm, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Marks the start of a step (the timeline's origin). DDP calls it at the start of forward.
  void start_step();
  // Zeroes every parameter's .grad with one memset per bucket (not one per parameter) and tells
  // autograd they are zero, so the next backward copies each gradient in instead of adding it
  // (autograd::mark_grad_zero). Call it where the optimizer's zero_grad would go: after the
  // optimizer step, before the next forward. A .grad that was replaced (no longer a bucket view)
  // is zeroed on its own. GPU: the memsets are on the compute stream, after the previous step's
  // wait for the all-reduces (wait_and_average), so they never race the comm stream.
  void zero_grad();
  // false: backward only accumulates into .grad locally (no_sync); true: the next backward syncs.
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  const std::vector<NamedParam>& params() const { return params_; }  // as given: trainable, in order
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const VariableLocator& locator(size_t param) const { return locators_[param]; }
  const ReducerOptions& options() const { return options_; }
  Timeline& timeline() { return timeline_; }

 private:
  // The five steps above, in order; finish_backward (5) = check_unused, launch the rest,
  // wait_and_average, record_timing.
  void on_grad_ready(size_t param);
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void finish_backward();
  void check_unused();
  void wait_and_average();
  void record_timing(MarkPtr backward_end);

  std::vector<NamedParam> params_;
  Communicator& comm_;
  ReducerOptions options_;
  std::unique_ptr<BucketCollective> collective_;  // all-reduce or reduce-scatter, per options_.collective
  std::vector<Bucket> buckets_;
  std::vector<VariableLocator> locators_;
  std::vector<char> ready_;     // per parameter: gradient seen in this backward
  size_t next_launch_ = 0;      // the next bucket index allowed to launch
  bool in_backward_ = false;    // a synchronised backward is running (its callback is queued)
  bool sync_ = true;
  Timeline timeline_;
  // One per parameter. The destructor drops them, so no hook outlives the reducer (a new reducer
  // over the same parameters starts clean), as PyTorch's reducer removes its own hooks.
  std::vector<GradReadyHookHandle> hooks_;
};

}  // namespace tandem::dist
