// dist/zero.cpp: segments, the parameter all-gather and the state gather of ZeRO (see zero.h).
#include "dist/zero.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

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

Zero::Zero(DistributedDataParallel& ddp, int stage)
    : ddp_(ddp),
      params_(ddp.reducer().params()),
      comm_(ddp.communicator()),
      stage_(stage),
      layout_(layout_buckets(ddp.reducer()), comm_.size()),
      pieces_(layout_.pieces(comm_.rank())) {
  TANDEM_CHECK(stage == 1 || stage == 2, "ZeRO stage must be 1 or 2, got ", stage, " (0 is plain DDP)");
  const Collective want = stage == 2 ? Collective::ReduceScatter : Collective::AllReduce;
  TANDEM_CHECK(ddp.reducer().options().collective == want, "ZeRO stage ", stage, " needs the DDP reducer's "
               "collective = ", stage == 2 ? "ReduceScatter" : "AllReduce", ": set DdpOptions::reducer.collective");
}

std::vector<optim::ParamSegment> Zero::segments() const {
  const int rank = comm_.rank();
  std::vector<optim::ParamSegment> segs;
  for (const ShardPiece& pc : pieces_) {
    const Bucket& b = ddp_.reducer().buckets()[pc.bucket];
    const Tensor& p = params_[pc.param].second;
    optim::ParamSegment s;
    s.name = params_[pc.param].first;
    s.param = flat(p, pc.param_offset, pc.length);
    s.grad = stage_ == 2 ? b.shard.slice(pc.slice_offset, pc.slice_offset + pc.length)
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

template <typename F>
Tensor Zero::own_slice(size_t b, F&& source, std::optional<DType> dtype) const {
  const LayoutBucket& lb = layout_.buckets()[b];
  const Tensor& first = params_[lb.params.front()].second;
  Tensor mine = Tensor::zeros({lb.chunk}, dtype.value_or(first.dtype()), first.device());
  for (const ShardPiece& pc : pieces_)
    if (pc.bucket == b) mine.slice(pc.slice_offset, pc.slice_offset + pc.length).copy_(source(pc));
  return mine;
}

void Zero::gather_parameters() {
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

optim::NamedTensors Zero::gather_state(const optim::Optimizer& opt, int root) const {
  return gather_slices(opt.state_slices(), root);
}

optim::NamedTensors Zero::gather_slices(const std::vector<optim::StateSlice>& slices, int root) const {
  autograd::NoGradGuard ng;
  std::map<std::string, size_t> index;  // parameter name -> index
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  // key "<param>.<suffix>": split at the longest parameter name that prefixes it.
  struct Parsed {
    size_t param;
    std::string suffix;
    const optim::StateSlice* slice;
  };
  std::vector<Parsed> parsed;
  std::set<std::string> suffixes;
  for (const optim::StateSlice& s : slices) {
    if (auto whole = index.find(s.key); whole != index.end()) {  // "<param>": an AMP master
      parsed.push_back({whole->second, "", &s});
      suffixes.insert("");
      continue;
    }
    const size_t dot = s.key.rfind('.');
    auto it = index.find(s.key.substr(0, dot));
    TANDEM_CHECK(dot != std::string::npos && it != index.end(), "internal: state key ", s.key, " names no parameter");
    parsed.push_back({it->second, s.key.substr(dot + 1), &s});
    suffixes.insert(s.key.substr(dot + 1));
  }
  // Every rank must run the same gathers: agree on the state names first (a rank may own little).
  std::string mine;
  for (const std::string& s : suffixes) mine += s + "\n";
  suffixes.clear();
  for (const std::string& all : all_gather_strings(comm_, mine))
    for (size_t a = 0, e; (e = all.find('\n', a)) != std::string::npos; a = e + 1) suffixes.insert(all.substr(a, e - a));
  // Which (parameter, state) exist, and the step counts: from the rank owning element 0.
  const size_t np = params_.size(), ns = suffixes.size();
  std::vector<std::string> names(suffixes.begin(), suffixes.end());
  std::vector<double> present(np * ns, 0.0);
  std::vector<char> owns_first(params_.size(), 0);  // this rank holds element 0 of the parameter
  for (const ShardPiece& pc : pieces_)
    if (pc.param_offset == 0) owns_first[pc.param] = 1;
  for (const Parsed& p : parsed) {
    if (p.slice->offset != 0 || !owns_first[p.param]) continue;  // "<name>.step" sits on every segment
    const size_t k = std::find(names.begin(), names.end(), p.suffix) - names.begin();
    present[p.param * ns + k] = p.suffix == "step" ? p.slice->value.item() + 1 : 1;  // +1: a step of 0 exists
  }
  sum_reduce()(present);
  optim::NamedTensors out;
  const bool keep = comm_.rank() == root;
  for (size_t k = 0; k < ns; ++k) {
    if (names[k] == "step") {
      for (size_t i = 0; i < np && keep; ++i)
        if (present[i * ns + k] > 0)
          out.emplace_back(params_[i].first + ".step", Tensor::full({}, present[i * ns + k] - 1, DType::F32));
      continue;
    }
    std::map<std::pair<size_t, int64_t>, Tensor> values;  // this rank's slices of this state
    for (const Parsed& p : parsed)
      if (p.suffix == names[k]) values[{p.param, p.slice->offset}] = p.slice->value;
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      const LayoutBucket& lb = layout_.buckets()[b];
      Tensor mine = own_slice(b, [&](const ShardPiece& pc) {
        auto it = values.find({pc.param, pc.param_offset});
        const Tensor& p = params_[pc.param].second;
        return it == values.end() ? Tensor::zeros({pc.length}, DType::F32, p.device())
                                  : it->second.view({pc.length}).to(DType::F32);
      }, DType::F32);
      Tensor all = Tensor::empty({mine.numel() * comm_.size()}, mine.dtype(), mine.device());
      comm_.all_gather(mine, all, "allgather state bucket " + std::to_string(b))->wait();
      for (size_t j = 0; j < lb.params.size() && keep; ++j)
        if (present[lb.params[j] * ns + k] > 0)
          out.emplace_back(params_[lb.params[j]].first + (names[k].empty() ? "" : "." + names[k]),
                           all.slice(lb.offsets[j], lb.offsets[j] + lb.lengths[j]).clone().view(
                               params_[lb.params[j]].second.shape()));
    }
  }
  return out;
}

}  // namespace tandem::dist
