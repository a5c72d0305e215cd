// dist/reducer.cpp: buckets, grad-ready hooks, in-order launches, the end-of-backward wait.
// See reducer.h for the algorithm and the reasons behind it.
#include "dist/reducer.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/graph_capture.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise.h"
#include "core/profile.h"
#include "dist/shard_layout.h"

namespace tandem::dist {

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> named_params, Communicator& comm,
                 ReducerOptions options)
    : params_(std::move(named_params)), comm_(comm), options_(options) {
  TANDEM_CHECK(!params_.empty(), "the reducer got no parameters that require grad: nothing to synchronise");
  std::vector<size_t> bytes;
  std::vector<BucketKey> keys;
  for (auto& [name, p] : params_) {
    TANDEM_CHECK(p.requires_grad(), "parameter ", name, " does not require grad; pass only trainable parameters");
    bytes.push_back(p.nbytes());
    keys.push_back({p.dtype(), p.device()});
  }
  // Bucketing off is the limit of tiny buckets: every parameter closes its own.
  BucketingOptions limits = options_.bucketed ? options_.bucketing : BucketingOptions{0, 0};
  const bool scatter = options_.collective == Collective::ReduceScatter;
  // ZeRO-2: a gradient of a full bucket's size or more is a bucket alone, so it can be handed over
  // as the bucket instead of copied into one (stage_gradient).
  if (scatter && limits.alone_bytes == 0) limits.alone_bytes = limits.bucket_bytes;
  TANDEM_CHECK(!scatter || options_.compression == Compression::None, "gradient compression is not supported with "
               "reduce-scatter (ZeRO-2): set compression = None");
  locators_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  for (const std::vector<size_t>& members : assign_buckets(bytes, keys, limits)) {
    Bucket b;
    b.params = members;
    int64_t total = 0;
    for (size_t p : members) {
      b.offsets.push_back(total);
      b.lengths.push_back(params_[p].second.numel());
      total += params_[p].second.numel();
    }
    const Tensor& first = params_[members.front()].second;
    if (scatter) {  // the buffer appears with the bucket's first gradient (stage_gradient)
      const int64_t chunk = shard_chunk(total, comm_.size());
      b.padded = chunk * comm_.size();
      b.shard = Tensor::zeros({chunk}, first.dtype(), first.device());
      for (size_t j = 0; j < members.size(); ++j) locators_[members[j]] = {buckets_.size(), j};
      buckets_.push_back(std::move(b));
      continue;
    }
    b.buffer = Tensor::zeros({total}, first.dtype(), first.device());
    for (size_t j = 0; j < members.size(); ++j) {
      Tensor& p = params_[members[j]].second;
      Tensor view = b.buffer.slice(b.offsets[j], b.offsets[j] + b.lengths[j]).view(p.shape());
      if (p.grad().defined()) view.copy_(p.grad());  // keep a gradient accumulated before wrapping
      p.set_grad(view);  // autograd accumulates in place, so gradients land in the bucket
      locators_[members[j]] = {buckets_.size(), j};
    }
    buckets_.push_back(std::move(b));
  }
  // Capturing `this` is safe: hooks_ removes every hook before the reducer is gone.
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].second.register_grad_ready_hook([this, i](Tensor&) { on_grad_ready(i); }));
}

Reducer::~Reducer() {
  hooks_.clear();
  for (Bucket& b : buckets_)  // the communicator must not write into a freed buffer
    if (b.work) try { b.work->wait(); } catch (...) {}  // NOLINT: a destructor must not throw
}

// Inside a CUDA graph capture (core/graph_capture.h) the marks would be events recorded in the
// graph, which the host can never read: the timeline skips captured steps, so replays have no
// per-bucket timing (train_imagenet's progress interval still times them as a whole).
void Reducer::start_step() {
  if (!graph_capture::active()) timeline_.start_step(comm_.mark());
}

void Reducer::zero_grad() {
  for (Bucket& b : buckets_) {
    b.buffer.zero_();
    for (size_t p : b.params) {
      Tensor& param = params_[p].second;
      Tensor g = param.grad();
      if (!g.defined()) continue;
      if (!g.shares_storage(b.buffer)) g.zero_();  // replaced by set_grad: not covered by the memset
      autograd::mark_grad_zero(param);
    }
  }
}

void Reducer::on_grad_ready(size_t i) {
  if (!sync_) return;  // no_sync: autograd already accumulated into .grad; nothing to communicate
  if (!in_backward_) {  // the first gradient of this backward
    in_backward_ = true;
    for (Bucket& b : buckets_) b.pending = b.params.size();
    ready_.assign(params_.size(), 0);
    next_launch_ = 0;
    if (!timeline_.step_started()) start_step();  // used without DDP: the step starts at the first gradient
    // `this` outlives the callback: autograd runs or drops it before backward() returns, and the
    // reducer cannot be destroyed from inside the backward whose hooks it owns.
    autograd::queue_callback([this] { finish_backward(); });
  }
  if (options_.collective == Collective::ReduceScatter) {
    stage_gradient(i);
    mark_ready(i);
    return;
  }
  const VariableLocator& loc = locators_[i];
  const Tensor g = params_[i].second.grad();
  TANDEM_CHECK(g.defined() && g.shares_storage(buckets_[loc.bucket].buffer), "the .grad of ", params_[i].first,
               " is no longer a view into its DDP bucket (it was replaced, e.g. with set_grad); zero "
               "gradients in place with Module::zero_grad() instead");
  mark_ready(i);
}

void Reducer::stage_gradient(size_t i) {
  Tensor& p = params_[i].second;
  Bucket& b = buckets_[locators_[i].bucket];
  const size_t j = locators_[i].index;
  if (b.params.size() == 1 && b.lengths[0] == b.padded) {
    // A lone parameter that needs no padding (VGG's 400 MB classifier weight): the gradient autograd
    // allocated becomes the bucket, so the largest buckets cost no second copy.
    b.buffer = p.grad().view({b.padded});
    p.set_grad(Tensor());
    return;
  }
  if (!b.buffer.defined()) b.buffer = Tensor::zeros({b.padded}, b.shard.dtype(), b.shard.device());
  b.buffer.slice(b.offsets[j], b.offsets[j] + b.lengths[j]).copy_(p.grad().view({b.lengths[j]}));
  p.set_grad(Tensor());  // the bucket holds it now; autograd allocates afresh next backward
}

void Reducer::release_finished_buckets() {
  // The oldest launched buckets past the allowance are waited for (GPU: a stream wait, the host does
  // not block), so at most scatter_in_flight full buffers outlive their launch.
  const size_t keep = static_cast<size_t>(std::max(options_.scatter_in_flight, 0));
  for (size_t k = 0; k < next_launch_; ++k) {
    Bucket& b = buckets_[k];
    if (!b.buffer.defined()) continue;
    if (k + keep < next_launch_) b.work->wait();
    if (k + keep < next_launch_ || b.work->done()) b.buffer = Tensor();
  }
}

void Reducer::mark_ready(size_t i) {
  TANDEM_CHECK(!ready_[i], "parameter ", params_[i].first, " received its gradient twice in one backward");
  ready_[i] = 1;
  Bucket& b = buckets_[locators_[i].bucket];
  if (b.padded && !b.buffer.defined())  // an unused parameter's bucket may have seen no gradient
    b.buffer = Tensor::zeros({b.padded}, b.shard.dtype(), b.shard.device());
  if (--b.pending == 0) {
    b.ready = comm_.mark();
    if (options_.overlap) launch_ready_buckets();
  }
}

void Reducer::launch_ready_buckets() {
  // Strictly in index order: bucket k+1 may be ready first, but every rank must launch bucket k
  // first or the ranks' all-reduces would pair up different buckets.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
  if (options_.collective == Collective::ReduceScatter) release_finished_buckets();
}

void Reducer::launch(size_t i) {
  Bucket& b = buckets_[i];
  if (b.padded) {
    // AMP's f16 buckets: divide before the sum, as the all-reduce below does (the buffer is
    // transient, so in place); wait_and_average then leaves the shard as it is.
    if (b.buffer.dtype() == DType::F16 && comm_.size() > 1)
      ops::scale_(b.buffer, 1.0f / static_cast<float>(comm_.size()));
    b.work = comm_.reduce_scatter(b.buffer, b.shard, ReduceOp::Sum, "reducescatter bucket " + std::to_string(i));
    return;
  }
  const std::string name = "allreduce bucket " + std::to_string(i);
  if (options_.compression != Compression::None && b.buffer.dtype() == DType::F32) {
    // Divide before the cast: the sum of N f16 gradients could overflow where their mean does not.
    DType wire = options_.compression == Compression::BF16 ? DType::BF16 : DType::F16;
    b.wire = ops::cast_raw(ops::scale(b.buffer, 1.0f / static_cast<float>(comm_.size())), wire);
    b.work = comm_.all_reduce(b.wire, ReduceOp::Sum, name);
  } else if (b.buffer.dtype() == DType::F16 && comm_.size() > 1) {
    // AMP's f16 buckets (optim/amp.h): divide a copy before the sum, as above - a loss-scaled sum of
    // N gradients overflows f16 long before their mean does; wait_and_average copies it back.
    b.wire = ops::scale(b.buffer, 1.0f / static_cast<float>(comm_.size()));
    b.work = comm_.all_reduce(b.wire, ReduceOp::Sum, name);
  } else {
    b.work = comm_.all_reduce(b.buffer, ReduceOp::Sum, name);
  }
}

// Step 5: autograd ran the last node of this backward.
void Reducer::finish_backward() {
  const MarkPtr backward_end = comm_.mark();
  check_unused();
  launch_ready_buckets();  // with overlap off, every bucket launches here
  TANDEM_CHECK(next_launch_ == buckets_.size(), "internal: ", buckets_.size() - next_launch_,
               " bucket(s) not launched at the end of backward");
  wait_and_average();
  record_timing(backward_end);
  in_backward_ = false;
}

// A parameter without a gradient leaves its bucket pending forever: fail (default) or count it as zero.
void Reducer::check_unused() {
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unused.push_back(i);
  if (!unused.empty() && !options_.find_unused_parameters) {
    for (Bucket& b : buckets_)  // leave no collective in flight, so the next backward starts clean
      if (b.work) b.work->wait(), b.work.reset();
    in_backward_ = false;
    timeline_.drop_step();
    std::string names;
    for (size_t k = 0; k < unused.size() && k < 8; ++k) names += (k ? ", " : "") + params_[unused[k]].first;
    if (unused.size() > 8) names += ", ... (" + std::to_string(unused.size()) + " in all)";
    TANDEM_THROW("parameter(s) ", names, " received no gradient in this backward, so their buckets can never be "
                 "all-reduced. Make every parameter take part in the loss, or set "
                 "find_unused_parameters = true in the DDP options to treat their gradients as zero");
  }
  for (size_t i : unused) mark_ready(i);  // their gradient is whatever .grad holds: zero after zero_grad
}

void Reducer::wait_and_average() {
  const float inv = 1.0f / static_cast<float>(comm_.size());
  for (Bucket& b : buckets_) {
    b.work->wait();  // GPU: the compute stream waits for the comm stream; the host does not block
    if (b.padded) {
      b.buffer = Tensor();  // only the shard is kept
      if (comm_.size() > 1 && b.shard.dtype() != DType::F16) ops::scale_(b.shard, inv);  // f16: divided at launch
    } else if (b.wire.defined()) {
      b.buffer.copy_(ops::cast_raw(b.wire, b.buffer.dtype()));  // divided before the cast
    } else if (comm_.size() > 1) {
      ops::scale_(b.buffer, inv);
    }
  }
}

void Reducer::record_timing(MarkPtr backward_end) {
  for (Bucket& b : buckets_) {
    if (graph_capture::active()) {  // see start_step: nothing to time, only the step's state to clear
      b.work.reset(), b.wire = Tensor(), b.ready.reset();
      continue;
    }
    const int64_t bytes = b.padded ? b.padded * static_cast<int64_t>(dtype_size(b.shard.dtype()))
                                   : static_cast<int64_t>((b.wire.defined() ? b.wire : b.buffer).nbytes());
    timeline_.bucket_done(b.ready, *b.work, bytes);
    b.work.reset();  // the step's collective and its wire copy are done with
    b.wire = Tensor();
  }
  if (graph_capture::active()) timeline_.drop_step();  // see start_step
  else timeline_.end_step(std::move(backward_end));
}

}  // namespace tandem::dist
