// dist/reducer.cpp: buckets, grad-ready hooks, in-order launches, the end-of-backward wait.
// See reducer.h for the algorithm and the reasons behind it.
#include "dist/reducer.h"

#include "core/autograd.h"
#include "core/graph_capture.h"

namespace tandem::dist {

Reducer::Reducer(std::vector<NamedParam> named_params, Communicator& comm, ReducerOptions options)
    : params_(std::move(named_params)), comm_(comm), options_(options) {
  TANDEM_CHECK(!params_.empty(), "the reducer got no parameters that require grad: nothing to synchronise");
  std::vector<size_t> bytes;
  std::vector<BucketKey> keys;
  for (auto& [name, p] : params_) {
    TANDEM_CHECK(p.requires_grad(), "parameter ", name, " does not require grad; pass only trainable parameters");
    bytes.push_back(p.nbytes());
    keys.push_back({p.dtype(), p.device(), options_.units.empty() ? 0 : options_.units.at(keys.size())});
  }
  collective_ = make_bucket_collective(options_.collective, comm_, options_.compression, options_.scatter_in_flight);
  // Bucketing off is the limit of tiny buckets: every parameter closes its own.
  const BucketingOptions limits = collective_->limits(options_.bucketed ? options_.bucketing : BucketingOptions{0, 0});
  locators_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  for (const std::vector<size_t>& members : assign_buckets(bytes, keys, limits)) {
    Bucket b;
    b.params = members;
    int64_t total = 0;
    for (size_t j = 0; j < members.size(); ++j) {
      b.offsets.push_back(total);
      b.lengths.push_back(params_[members[j]].second.numel());
      total += b.lengths.back();
      locators_[members[j]] = {buckets_.size(), j};
    }
    collective_->allocate(b, params_);
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
    if (b.buffer.defined()) b.buffer.zero_();  // reduce-scatter buffers exist only during backward
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
  const VariableLocator& loc = locators_[i];
  collective_->take_gradient(buckets_[loc.bucket], loc.index, params_[i]);
  mark_ready(i);
}

void Reducer::mark_ready(size_t i) {
  TANDEM_CHECK(!ready_[i], "parameter ", params_[i].first, " received its gradient twice in one backward");
  ready_[i] = 1;
  Bucket& b = buckets_[locators_[i].bucket];
  if (--b.pending == 0) {
    b.ready = comm_.mark();
    if (options_.overlap) launch_ready_buckets();
  }
}

void Reducer::launch_ready_buckets() {
  // Strictly in index order: bucket k+1 may be ready first, but every rank must launch bucket k
  // first or the ranks' all-reduces would pair up different buckets.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    collective_->launch(buckets_[next_launch_], next_launch_);
    ++next_launch_;
  }
  collective_->after_launches(buckets_, next_launch_);
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
  for (Bucket& b : buckets_) {
    b.work->wait();  // GPU: the compute stream waits for the comm stream; the host does not block
    collective_->average(b);
  }
}

void Reducer::record_timing(MarkPtr backward_end) {
  // Inside a capture (see start_step) there is nothing to time, only the step's state to clear.
  const bool captured = graph_capture::active();
  for (Bucket& b : buckets_) {
    if (!captured) timeline_.bucket_done(b.ready, *b.work, b.wire_bytes);
    b.work.reset();  // the step's collective is done with
    b.ready.reset();
  }
  if (captured) timeline_.drop_step();
  else timeline_.end_step(std::move(backward_end));
}

}  // namespace tandem::dist
