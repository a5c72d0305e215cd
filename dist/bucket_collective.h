// dist/bucket_collective.h: what one bucket sends and what comes back - all-reduce or reduce-scatter.
//
// The reducer (reducer.h) decides *when* a bucket goes: once its last gradient is ready and every
// bucket before it has gone. A BucketCollective decides *what* goes, and where the averaged
// gradients land. Two of them, one short class each:
//   AllReduceBucket     (DDP, ZeRO-1): the bucket's buffer is allocated once and every .grad is a
//                       view into it, so autograd accumulates straight into the bucket and nothing
//                       is copied. The whole averaged bucket comes back, in place.
//   ReduceScatterBucket (ZeRO-2): only this rank's slice of the averaged bucket comes back
//                       (Bucket::shard). The buffer is padded to the canonical layout
//                       (shard_layout.h) so slice r is rank r's, and it is transient: the grad-ready
//                       hook copies .grad into it and drops .grad. A parameter of a full bucket's
//                       size or more is a bucket alone (BucketingOptions::alone_bytes) and, when it
//                       fills its bucket exactly, hands its .grad over as the bucket: autograd's
//                       fresh gradient is the only full-size copy. A buffer lives from its bucket's
//                       first gradient until its reduce-scatter is done (released when done() says
//                       so, or waited for once more than scatter_in_flight buckets are launched).
//                       Under no_sync nothing reaches it: .grad accumulates whole, as with DDP.
// Averaging: the sum is divided by N after the collective (in f32, exact for the equivalence
// tests). Where the sum itself could overflow, the gradients are divided *before* it: with bf16/f16
// compression (the cast copy is divided) and for AMP's f16 buckets (all-reduced or reduce-scattered
// alike, so ZeRO-2 skips exactly the steps DDP skips): a loss-scaled sum of N f16 gradients
// overflows long before their mean does.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/bucketing.h"
#include "dist/communicator.h"

namespace tandem::dist {

enum class Compression { None, BF16, F16 };  // dtype of f32 gradients on the wire (AllReduceBucket)
enum class Collective { AllReduce, ReduceScatter };

// One flat gradient buffer and the parameters whose gradients it holds (PyTorch's Bucket).
struct Bucket {
  Tensor buffer;                 // flat gradients, back to back; dtype and device of its parameters
  std::vector<size_t> params;    // indices into the reducer's parameter list, in buffer order
  std::vector<int64_t> offsets;  // element offset of each parameter's gradient in `buffer`
  std::vector<int64_t> lengths;  // element count of each parameter's gradient
  size_t pending = 0;            // gradients not yet ready in this backward; launch at 0
  Tensor wire;                   // what travels when it is not `buffer`: a cast or pre-divided copy
  WorkPtr work;                  // the collective in flight; null before launch
  int64_t wire_bytes = 0;        // bytes the last launch put on the wire (for the Timeline)
  MarkPtr ready;                 // when pending reached 0, on the compute timeline (for the Timeline)
  // ReduceScatter only:
  int64_t padded = 0;            // buffer elements: world x chunk (shard_layout.h); buffer is transient
  Tensor shard;                  // this rank's averaged slice (chunk elements), persistent
};

using NamedParam = std::pair<std::string, Tensor>;

class BucketCollective {
 public:
  virtual ~BucketCollective() = default;
  // The bucketing limits it needs (ReduceScatter: large parameters in buckets of their own).
  virtual BucketingOptions limits(BucketingOptions o) const { return o; }
  // At construction, per bucket (params, offsets, lengths set): its memory, and where .grad lives.
  virtual void allocate(Bucket& b, std::vector<NamedParam>& params) = 0;
  // From the grad-ready hook: p (the bucket's j-th parameter) has its complete gradient in .grad.
  virtual void take_gradient(Bucket& b, size_t j, NamedParam& p) = 0;
  // Starts bucket `index`'s collective: sets b.work and b.wire_bytes.
  virtual void launch(Bucket& b, size_t index) = 0;
  // After a round of launches: buckets [0, launched) have gone.
  virtual void after_launches(std::vector<Bucket>& buckets, size_t launched) { (void)buckets, (void)launched; }
  // End of backward, after b.work->wait(): leaves the averaged gradients where the optimizer reads.
  virtual void average(Bucket& b) = 0;
};

// AllReduceBucket or ReduceScatterBucket (bucket_collective.cpp), for a reducer over `comm`.
// `compression` applies to the all-reduce only; `scatter_in_flight` to the reduce-scatter only
// (ReducerOptions says what they mean).
std::unique_ptr<BucketCollective> make_bucket_collective(Collective collective, Communicator& comm,
                                                         Compression compression, int scatter_in_flight);

}  // namespace tandem::dist
