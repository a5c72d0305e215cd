// dist/bucket_collective.cpp: the all-reduce and the reduce-scatter of one bucket (see bucket_collective.h).
#include "dist/bucket_collective.h"

#include <algorithm>

#include "core/ops/copy/copy.h"
#include "core/ops/elementwise/elementwise.h"
#include "dist/shard_layout.h"

namespace tandem::dist {
namespace {

float inverse(const Communicator& c) { return 1.0f / static_cast<float>(c.size()); }

// DDP and ZeRO-1: .grad lives in the bucket; the whole averaged bucket comes back in place.
class AllReduceBucket final : public BucketCollective {
 public:
  AllReduceBucket(Communicator& comm, Compression compression) : comm_(comm), compression_(compression) {}

  void allocate(Bucket& b, std::vector<NamedParam>& params) override {
    const Tensor& first = params[b.params.front()].second;
    b.buffer = Tensor::zeros({b.offsets.back() + b.lengths.back()}, first.dtype(), first.device());
    for (size_t j = 0; j < b.params.size(); ++j) {
      Tensor& p = params[b.params[j]].second;
      Tensor view = b.buffer.slice(b.offsets[j], b.offsets[j] + b.lengths[j]).view(p.shape());
      if (p.grad().defined()) view.copy_(p.grad());  // keep a gradient accumulated before wrapping
      p.set_grad(view);  // autograd accumulates in place, so gradients land in the bucket
    }
  }

  void take_gradient(Bucket& b, size_t, NamedParam& p) override {
    const Tensor g = p.second.grad();
    TANDEM_CHECK(g.defined() && g.shares_storage(b.buffer), "the .grad of ", p.first, " is no longer a view into "
                 "its DDP bucket (it was replaced, e.g. with set_grad); zero gradients in place with "
                 "Module::zero_grad() instead");
  }

  void launch(Bucket& b, size_t index) override {
    b.wire = Tensor();
    if (compression_ != Compression::None && b.buffer.dtype() == DType::F32) {
      // Divide before the cast: the sum of N f16 gradients could overflow where their mean does not.
      const DType wire = compression_ == Compression::BF16 ? DType::BF16 : DType::F16;
      b.wire = ops::cast_raw(ops::scale(b.buffer, inverse(comm_)), wire);
    } else if (b.buffer.dtype() == DType::F16 && comm_.size() > 1) {
      b.wire = ops::scale(b.buffer, inverse(comm_));  // AMP's f16 bucket: a divided copy travels
    }
    Tensor& sent = b.wire.defined() ? b.wire : b.buffer;
    b.wire_bytes = static_cast<int64_t>(sent.nbytes());
    b.work = comm_.all_reduce(sent, ReduceOp::Sum, "allreduce bucket " + std::to_string(index));
  }

  void average(Bucket& b) override {
    if (b.wire.defined()) {
      b.buffer.copy_(ops::cast_raw(b.wire, b.buffer.dtype()));  // divided before the sum
      b.wire = Tensor();
    } else if (comm_.size() > 1) {
      ops::scale_(b.buffer, inverse(comm_));
    }
  }

 private:
  Communicator& comm_;
  Compression compression_;
};

// ZeRO-2: the bucket is transient and padded; only this rank's averaged slice, b.shard, stays.
class ReduceScatterBucket final : public BucketCollective {
 public:
  ReduceScatterBucket(Communicator& comm, int in_flight) : comm_(comm), in_flight_(std::max(in_flight, 0)) {}

  BucketingOptions limits(BucketingOptions o) const override {
    // A gradient of a full bucket's size or more is a bucket alone, so it can be handed over as the
    // bucket instead of copied into one (take_gradient).
    if (o.alone_bytes == 0) o.alone_bytes = o.bucket_bytes;
    return o;
  }

  void allocate(Bucket& b, std::vector<NamedParam>& params) override {
    const Tensor& first = params[b.params.front()].second;
    const int64_t chunk = shard_chunk(b.offsets.back() + b.lengths.back(), comm_.size());
    b.padded = chunk * comm_.size();
    b.shard = Tensor::zeros({chunk}, first.dtype(), first.device());  // the buffer comes with the first gradient
  }

  void take_gradient(Bucket& b, size_t j, NamedParam& p) override {
    Tensor& param = p.second;
    if (b.params.size() == 1 && b.lengths[0] == b.padded) {
      // A lone parameter that needs no padding (VGG's 400 MB classifier weight): the gradient
      // autograd allocated becomes the bucket, so the largest buckets cost no second copy.
      b.buffer = param.grad().view({b.padded});
    } else {
      if (!b.buffer.defined()) b.buffer = Tensor::zeros({b.padded}, b.shard.dtype(), b.shard.device());
      b.buffer.slice(b.offsets[j], b.offsets[j] + b.lengths[j]).copy_(param.grad().view({b.lengths[j]}));
    }
    param.set_grad(Tensor());  // the bucket holds it now; autograd allocates afresh next backward
  }

  void launch(Bucket& b, size_t index) override {
    // A bucket whose parameters were all unused saw no gradient: its contribution is zeros.
    if (!b.buffer.defined()) b.buffer = Tensor::zeros({b.padded}, b.shard.dtype(), b.shard.device());
    // AMP's f16 buckets: divide before the sum (the buffer is transient, so in place); average()
    // then leaves the shard as it is.
    if (b.buffer.dtype() == DType::F16 && comm_.size() > 1) ops::scale_(b.buffer, inverse(comm_));
    b.wire_bytes = static_cast<int64_t>(b.buffer.nbytes());
    b.work = comm_.reduce_scatter(b.buffer, b.shard, ReduceOp::Sum, "reducescatter bucket " + std::to_string(index));
  }

  void after_launches(std::vector<Bucket>& buckets, size_t launched) override {
    // Finished buffers are dropped; the oldest launched ones past the allowance are waited for (GPU:
    // a stream wait, the host does not block), so at most in_flight_ full buffers outlive their
    // launch. A backward that outruns the network would otherwise hold every bucket at once - all
    // the gradients ZeRO-2 is meant not to keep.
    for (size_t k = 0; k < launched; ++k) {
      Bucket& b = buckets[k];
      if (!b.buffer.defined()) continue;
      const bool too_old = k + in_flight_ < launched;
      if (too_old) b.work->wait();
      if (too_old || b.work->done()) b.buffer = Tensor();
    }
  }

  void average(Bucket& b) override {
    b.buffer = Tensor();  // only the shard is kept
    if (comm_.size() > 1 && b.shard.dtype() != DType::F16) ops::scale_(b.shard, inverse(comm_));  // f16: at launch
  }

 private:
  Communicator& comm_;
  size_t in_flight_;  // ReducerOptions::scatter_in_flight
};

}  // namespace

std::unique_ptr<BucketCollective> make_bucket_collective(Collective collective, Communicator& comm,
                                                         Compression compression, int scatter_in_flight) {
  if (collective == Collective::AllReduce) return std::make_unique<AllReduceBucket>(comm, compression);
  TANDEM_CHECK(compression == Compression::None, "gradient compression is not supported with reduce-scatter "
               "(ZeRO-2): set compression = None");
  return std::make_unique<ReduceScatterBucket>(comm, scatter_in_flight);
}

}  // namespace tandem::dist
