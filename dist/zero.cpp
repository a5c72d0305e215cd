// dist/zero.cpp: segments, the stage-3 shards and the stage-1/2 parameter all-gather of ZeRO (see zero.h).
#include "dist/zero.h"

#include "core/autograd.h"
#include "core/profile.h"

namespace tandem::dist {
namespace {

std::vector<LayoutBucket> layout_buckets(const Reducer& r) {
  std::vector<LayoutBucket> out;
  for (const Bucket& b : r.buckets()) out.push_back({b.params, b.offsets, b.lengths});
  return out;
}

// A flat 1-D view of elements [offset, offset + n) of t (no autograd).
Tensor flat(const Tensor& t, int64_t offset, int64_t n) { return t.detach().view({t.numel()}).slice(offset, offset + n); }

}  // namespace

Zero::Zero(DistributedDataParallel& ddp, int stage, const Zero3Options& zero3)
    : ddp_(stage == 3 ? regroup_by_unit(ddp, zero3) : ddp),  // first: the layout follows the buckets
      comm_(ddp.communicator()),
      stage_(stage),
      params_(ddp.reducer().params()),
      layout_(layout_buckets(ddp.reducer()), comm_.size()),
      pieces_(layout_.pieces(comm_.rank())) {
  TANDEM_CHECK(stage >= 1 && stage <= 3, "ZeRO stage must be 1, 2 or 3, got ", stage, " (0 is plain DDP)");
  const Collective want = stage >= 2 ? Collective::ReduceScatter : Collective::AllReduce;
  TANDEM_CHECK(ddp.reducer().options().collective == want, "ZeRO stage ", stage, " needs the DDP reducer's "
               "collective = ", stage == 2 ? "ReduceScatter" : "AllReduce", ": set DdpOptions::reducer.collective");
  if (stage < 3) return;
  std::vector<Tensor> shards;  // from the parameters DDP broadcast: the last time they are whole
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    shards.push_back(own_slice(b, [&](const ShardPiece& pc) { return flat(params_[pc.param].second, pc.param_offset, pc.length); }));
  schedule_ = std::make_unique<Zero3Schedule>(ddp, layout_, std::move(shards), zero3);
}

std::vector<optim::ParamSegment> Zero::segments() const {
  const int rank = comm_.rank();
  std::vector<optim::ParamSegment> segs;
  for (const ShardPiece& pc : pieces_) {
    const Bucket& b = ddp_.reducer().buckets()[pc.bucket];
    const Tensor& p = params_[pc.param].second;
    optim::ParamSegment s;
    s.name = params_[pc.param].first;
    s.param = stage_ == 3 ? schedule_->shard(pc.bucket).slice(pc.slice_offset, pc.slice_offset + pc.length)
                          : flat(p, pc.param_offset, pc.length);
    s.grad = stage_ >= 2 ? b.shard.slice(pc.slice_offset, pc.slice_offset + pc.length)
                         : flat(b.buffer, rank * layout_.buckets()[pc.bucket].chunk + pc.slice_offset, pc.length);
    s.offset = pc.param_offset;
    s.param_numel = p.numel();
    s.param_index = static_cast<int64_t>(pc.param);
    segs.push_back(std::move(s));
  }
  return segs;
}

optim::SumSquaresReduce Zero::sum_reduce() const {
  Communicator* comm = &comm_;
  return [comm](std::vector<double>& v) {  // a few doubles, in f64 on the communicator's device
    Tensor t = Tensor::from_vector_f64(v, {static_cast<int64_t>(v.size())}, DType::F64, comm->device());
    comm->all_reduce(t, ReduceOp::Sum, "zero sum of squares")->wait();
    v = t.to_vector_f64();
  };
}

std::vector<Tensor> Zero::grads() const {
  std::vector<Tensor> out;
  for (const optim::ParamSegment& s : segments()) out.push_back(s.grad);
  return out;
}

void Zero::zero_grad(optim::Optimizer& opt) {
  // Stage 1: the whole buckets, as DDP (one memset each). They are also marked zero, so backward
  // copies each fresh gradient in instead of adding it: a 16-bit add on the CPU computes in f32
  // (core/ops/common/cpu/widen.h) and would widen both the bucket view and the gradient - for VGG-16's
  // classifier weight 784 MiB of f32 copies at the peak. 0 + g == g (up to a zero's sign, which
  // the all-reduce and the optimizer treat alike), so the result is unchanged.
  if (stage_ == 1) ddp_.reducer().zero_grad();
  opt.zero_grad();
}

Tensor Zero::own_slice(size_t b, const std::function<Tensor(const ShardPiece&)>& source,
                       std::optional<DType> dtype) const {
  const LayoutBucket& lb = layout_.buckets()[b];
  const Tensor& first = params_[lb.params.front()].second;
  Tensor mine = Tensor::zeros({lb.chunk}, dtype.value_or(first.dtype()), first.device());
  for (const ShardPiece& pc : pieces_)
    if (pc.bucket == b) mine.slice(pc.slice_offset, pc.slice_offset + pc.length).copy_(source(pc));
  return mine;
}

void Zero::gather_parameters() {
  if (stage_ == 3) return;  // the shards were updated in place; each unit's next use gathers it
  profile::Range range("zero allgather parameters");
  autograd::NoGradGuard ng;
  struct InFlight {
    size_t b;
    Tensor mine, all;
    WorkPtr work;
  };
  auto copy_out = [&](InFlight& f) {
    f.work->wait();
    const LayoutBucket& lb = layout_.buckets()[f.b];
    if (f.all.shares_storage(params_[lb.params.front()].second)) return;  // gathered in place
    for (size_t j = 0; j < lb.params.size(); ++j)
      flat(params_[lb.params[j]].second, 0, lb.lengths[j]).copy_(f.all.slice(lb.offsets[j], lb.offsets[j] + lb.lengths[j]));
  };
  // Two buckets in flight: bucket b's copy-out overlaps bucket b+1's gather, and at most two
  // gathered buckets exist at a time (the transient term of the memory ledger).
  std::vector<InFlight> pending;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const LayoutBucket& lb = layout_.buckets()[b];
    InFlight f{b, own_slice(b, [&](const ShardPiece& pc) {
      return flat(params_[pc.param].second, pc.param_offset, pc.length);
    }), Tensor(), nullptr};
    // A lone, unpadded parameter (ZeRO-2 gives large ones a bucket alone, bucketing.h) is gathered
    // straight into itself: no gathered copy of VGG's 392 MiB classifier weight. Its own slice goes
    // in unchanged, so `mine` may be sent from a copy while the gather overwrites the rest.
    // Stage 1's gradient bucket is spent once the step has read it, and it is exactly the gathered
    // size when the bucket needs no padding: the gather lands there (zero_grad clears it before the
    // next backward), so it costs no buffer either.
    const Tensor& grads = ddp_.reducer().buckets()[b].buffer;
    if (lb.params.size() == 1 && lb.chunk * comm_.size() == lb.lengths[0])
      f.all = flat(params_[lb.params[0]].second, 0, lb.lengths[0]);
    else if (stage_ == 1 && grads.numel() == f.mine.numel() * comm_.size())
      f.all = grads.detach();
    else
      f.all = Tensor::empty({f.mine.numel() * comm_.size()}, f.mine.dtype(), f.mine.device());
    f.work = comm_.all_gather(f.mine, f.all, "allgather params bucket " + std::to_string(b));
    pending.push_back(std::move(f));
    if (pending.size() == 2) {
      copy_out(pending.front());
      pending.erase(pending.begin());
    }
  }
  for (InFlight& f : pending) copy_out(f);
}

}  // namespace tandem::dist
