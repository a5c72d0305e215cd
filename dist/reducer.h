// dist/reducer.h: averages gradients across ranks while backward is still running.
//
// The heart of data parallelism. At construction every parameter's .grad becomes a view into a
// flat bucket buffer (dist/bucketing.h decides which bucket). During backward:
//   1. autograd fires a parameter's grad-ready hook when its gradient is complete;
//   2. the hook decrements its bucket's pending count; at zero the bucket is ready;
//   3. ready buckets are launched strictly in index order (a bucket that is ready early waits for
//      the ones before it), because every rank must issue the same all-reduces in the same order
//      or the collectives would pair up different buckets across ranks;
//   4. a launch hands the flat buffer to the communicator: NCCL on the comm stream after an event
//      recorded on the compute stream, or MPI on the comm thread;
//   5. when backward ends (autograd::queue_callback), the reducer checks for unused parameters,
//      waits for every bucket and divides by the world size (on a GPU "waits" is a stream wait:
//      the host never blocks), and records the step's timing.
// The buckets' sum is averaged after the all-reduce (in f32, exact for the equivalence tests);
// with 16-bit compression the gradients are divided before the cast instead, so the sum on the
// wire cannot overflow f16; AMP's f16 buckets are divided before the sum too (all-reduced or
// reduce-scattered alike, so ZeRO-2 skips exactly the steps DDP skips).
//
// What it leaves out: rebuilding buckets from the observed order (PyTorch does this after the first
// iteration), static-graph optimisations, and gradients of sparse or non-contiguous parameters.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/bucketing.h"
#include "dist/communicator.h"
#include "dist/timeline.h"

namespace tandem::dist {

enum class Compression { None, BF16, F16 };
// What a bucket's collective leaves on each rank.
//   AllReduce:     the whole averaged bucket (DDP and ZeRO-1); .grad is a view into the bucket.
//   ReduceScatter: only this rank's slice of the averaged bucket, Bucket::shard (ZeRO-2). Buckets are
//                  padded to the canonical layout (shard_layout.h) so slice r is rank r's; .grad is
//                  not a bucket view: the grad-ready hook copies the gradient into the bucket and
//                  drops .grad. A parameter of a full bucket's size or more is a bucket alone
//                  (BucketingOptions::alone_bytes) and, when it fills its bucket exactly, hands over
//                  its .grad as the bucket: autograd's fresh gradient is the only full-size copy.
//                  A bucket's buffer lives from its first gradient until its reduce-scatter is done
//                  (released when done() says so, or waited for once more than scatter_in_flight
//                  buckets are launched, at the latest at the end of backward). Under no_sync .grad
//                  accumulates locally, whole, as with DDP.
enum class Collective { AllReduce, ReduceScatter };

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
  Collective collective = Collective::AllReduce;  // ReduceScatter: ZeRO-2 (see above); no compression
  // ReduceScatter: how many launched buckets may still hold their full buffer while backward goes on.
  // When backward outruns the network (CPU ranks sharing cores), every bucket would otherwise be
  // alive at the end of backward - the whole 4Ψ of gradients ZeRO-2 exists to avoid. 1 (default)
  // keeps one reduce-scatter overlapping the next layer's backward; 0 waits for each at its launch.
  int scatter_in_flight = 1;
};

// One flat gradient buffer and the parameters whose .grad are views into it.
struct Bucket {
  Tensor buffer;                 // flat gradients, back to back; dtype and device of its parameters
  std::vector<size_t> params;    // indices into the reducer's parameter list, in buffer order
  std::vector<int64_t> offsets;  // element offset of each parameter's gradient in `buffer`
  std::vector<int64_t> lengths;  // element count of each parameter's gradient
  size_t pending = 0;            // gradients not yet ready in this backward; launch at 0
  Tensor wire;                   // `buffer` cast to the wire dtype while in flight (compression only)
  WorkPtr work;                  // the all-reduce in flight; null before launch
  MarkPtr ready;                 // when pending reached 0, on the compute timeline (for the Timeline)
  // ReduceScatter only:
  int64_t padded = 0;            // buffer elements: world x chunk (shard_layout.h); buffer is transient
  Tensor shard;                  // this rank's averaged slice (chunk elements), persistent
};

// Where a parameter's gradient lives.
struct VariableLocator {
  size_t bucket = 0;  // index into buckets()
  size_t index = 0;   // position within that bucket's params/offsets/lengths
};

class Reducer {
 public:
  // named_params: the parameters that require grad, in registration order.
  Reducer(std::vector<std::pair<std::string, Tensor>> named_params, Communicator& comm, ReducerOptions options = {});
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
  void launch(size_t b);
  void stage_gradient(size_t param);  // ReduceScatter: .grad into its (lazily allocated) bucket
  void release_finished_buckets();    // ReduceScatter: drop done buffers; wait beyond scatter_in_flight
  void finish_backward();
  void check_unused();
  void wait_and_average();
  void record_timing(MarkPtr backward_end);

  std::vector<std::pair<std::string, Tensor>> params_;
  Communicator& comm_;
  ReducerOptions options_;
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
