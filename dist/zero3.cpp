// dist/zero3.cpp: ZeRO-3's units, gathered storage and hooks (see zero3.h for the schedule).
#include "dist/zero3.h"

#include <algorithm>
#include <map>

namespace tandem::dist {
namespace {

// Each parameter's unit; `units` gets the units' modules (0: the root). Pre-order: a wrapped module
// opens a unit unless it sits in one (units do not nest); a module's parameters go to its unit, and
// its children's too until one of them opens its own.
std::map<const TensorImpl*, size_t> walk_units(Module& root, const Zero3Options& o, std::vector<Module*>& units) {
  units = {&root};
  std::map<const TensorImpl*, size_t> unit_of;
  std::function<void(Module&, const Module*, size_t)> walk = [&](Module& m, const Module* parent, size_t unit) {
    if (parent && unit == 0 && m.num_parameters() > 0 && o.wrap(m, *parent)) unit = units.size(), units.push_back(&m);
    for (auto& [name, p] : m.named_parameters()) unit_of[p.impl_ptr().get()] = unit;
    for (auto& [name, child] : m.named_children()) walk(*child, &m, unit);
  };
  walk(root, nullptr, 0);
  return unit_of;
}

// The unit of each of the reducer's parameters.
std::vector<size_t> unit_of_params(DistributedDataParallel& ddp, const Zero3Options& o, std::vector<Module*>& units) {
  std::map<const TensorImpl*, size_t> unit_of = walk_units(ddp.module(), o, units);
  std::vector<size_t> out;
  for (const auto& [name, p] : ddp.reducer().params()) out.push_back(unit_of[p.impl_ptr().get()]);
  return out;
}

}  // namespace

std::vector<size_t> unit_of_parameters(Module& root, const Zero3Options& options, std::vector<Module*>* units) {
  std::vector<Module*> mine;
  std::map<const TensorImpl*, size_t> unit_of = walk_units(root, options, units ? *units : mine);
  std::vector<size_t> out;
  for (auto& [name, p] : root.named_parameters()) out.push_back(unit_of[p.impl_ptr().get()]);
  return out;
}

DistributedDataParallel& regroup_by_unit(DistributedDataParallel& ddp, const Zero3Options& options) {
  std::vector<Module*> modules;
  const std::vector<size_t> unit = unit_of_params(ddp, options, modules);
  ReducerOptions ro = ddp.reducer().options();
  ro.collective = Collective::ReduceScatter;  // the gradients: as ZeRO-2
  ro.bucketing = {SIZE_MAX, SIZE_MAX, 0};     // no size limit: a unit is gathered whole anyway
  // A key per run of consecutive parameters of one unit: the root's parameters before and after the
  // blocks (BERT's embeddings and head) are two buckets, so the head's gradients, ready early in
  // backward, need not wait for the embeddings' at its end (buckets launch in order).
  ro.units.assign(1, 0);
  for (size_t i = 1; i < unit.size(); ++i) ro.units.push_back(ro.units.back() + (unit[i] != unit[i - 1]));
  ddp.rebuild_reducer(ro);
  return ddp;
}

Zero3Schedule::Zero3Schedule(DistributedDataParallel& ddp, const ShardLayout& layout, std::vector<Tensor> shards,
                             const Zero3Options& options)
    : comm_(ddp.communicator()),
      timeline_(ddp.timeline()),
      shards_(std::move(shards)),
      prefetch_(static_cast<size_t>(std::max(options.prefetch, 0))) {
  const Reducer& r = ddp.reducer();
  std::vector<Module*> units;
  const std::vector<size_t> unit_of = unit_of_params(ddp, options, units);
  units_.resize(units.size());
  for (size_t b = 0; b < layout.buckets().size(); ++b) {
    const LayoutBucket& lb = layout.buckets()[b];  // its gathered buffer: the whole padded bucket
    full_.push_back(Tensor::empty({shards_[b].numel() * comm_.size()}, shards_[b].dtype(), shards_[b].device()));
    full_[b].storage()->release();  // the shards hold the values now; bytes come with the first gather
    for (size_t j = 0; j < lb.params.size(); ++j) {  // same TensorImpl, its bytes now in the bucket's buffer
      TensorImpl& p = r.params()[lb.params[j]].second.impl();
      p.storage = full_[b].storage();
      p.offset = static_cast<size_t>(lb.offsets[j]) * dtype_size(p.dtype);
    }
    units_[unit_of[lb.params.front()]].buckets.push_back(b);
  }
  // `this` in the hooks: every handle is a member, so no hook outlives the schedule.
  for (size_t u = 0; u < units.size(); ++u) {
    hooks_.push_back(units[u]->register_forward_pre_hook([this, u](Module&) { before_forward(u); }));
    hooks_.push_back(units[u]->register_forward_hook([this, u](Module&, const Tensor& y) { after_forward(u, y); }));
  }
  for (size_t i = 0; i < r.params().size(); ++i) {
    const size_t u = unit_of[i];
    ++units_[u].params;
    Tensor param = r.params()[i].second;  // a handle: the hook lives on the shared TensorImpl
    grad_hooks_.push_back(param.register_grad_ready_hook([this, u](Tensor&) { on_grad_ready(u); }));
  }
}

void Zero3Schedule::before_forward(size_t u) {
  if (u == 0) {  // the step starts
    order_.clear();
    for (size_t v = 0; v < units_.size(); ++v) {
      units_[v].pending = units_[v].params;
      if (units_[v].pinned) gather(v);
    }
  }
  const size_t pos = order_.size();
  order_.push_back(u);
  gather(u);
  // The units the previous step ran next, if this step has followed it so far.
  if (pos < last_order_.size() && last_order_[pos] == u)
    for (size_t k = 1; k <= prefetch_ && pos + k < last_order_.size(); ++k) gather(last_order_[pos + k]);
  for (size_t v = 0; v < units_.size(); ++v)  // the root's pre-hook: every pinned unit, used unannounced
    if (v == u || (u == 0 && units_[v].pinned)) wait(v, false);
  units_[u].saw_forward = true;
  units_[u].begin = comm_.mark();
}

void Zero3Schedule::after_forward(size_t u, const Tensor& y) {
  Unit& unit = units_[u];
  timeline_.compute_done(u, false, std::exchange(unit.begin, nullptr), comm_.mark());
  if (u == 0) {  // the step's forward ends: with no backward to come, nothing stays
    last_order_ = order_;
    if (!autograd::grad_mode_enabled()) free_all();
    return;
  }
  if (!unit.pinned) free(u);
  if (autograd::grad_mode_enabled() && y.defined() && y.grad_fn())
    backward_hooks_.push_back(autograd::register_pre_backward_hook(y, [this, u] { before_backward(u); }));
}

void Zero3Schedule::begin_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  autograd::queue_callback([this] { end_backward(); });  // `this` outlives the backward it hooks
}

void Zero3Schedule::before_backward(size_t u) {
  begin_backward();
  gather(u);
  // The units that ran before u (its last run) are the next ones backward reaches.
  const size_t after = static_cast<size_t>(order_.rend() - std::find(order_.rbegin(), order_.rend(), u));
  for (size_t k = 1; k < after && k <= prefetch_; ++k) gather(order_[after - 1 - k]);  // after: u's index + 1
  wait(u, true);
  units_[u].saw_backward = true;
  units_[u].begin = comm_.mark();
}

void Zero3Schedule::on_grad_ready(size_t u) {
  begin_backward();  // a gradient may come before any unit's pre-backward hook (the root's own)
  Unit& unit = units_[u];
  if (unit.pending == 0 || --unit.pending > 0) return;
  if (unit.begin) timeline_.compute_done(u, true, std::exchange(unit.begin, nullptr), comm_.mark());
  if (!unit.pinned) free(u);
}

void Zero3Schedule::end_backward() {
  in_backward_ = false;
  backward_hooks_.clear();
  if (!traced_)
    for (size_t u = 1; u < units_.size(); ++u) units_[u].pinned = !units_[u].saw_forward || !units_[u].saw_backward;
  traced_ = true;
  free_all();
}

void Zero3Schedule::gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.gathered) return;
  for (size_t b : unit.buckets) {
    full_[b].storage()->reacquire();
    unit.works.push_back(comm_.all_gather(shards_[b], full_[b], "allgather unit " + std::to_string(u)));
  }
  unit.gathered = true;
}

void Zero3Schedule::wait(size_t u, bool backward) {
  for (WorkPtr& w : units_[u].works) {
    w->wait();  // GPU: the compute stream waits for the comm stream; the host does not block
    timeline_.gather_done(u, backward, *w);
  }
  units_[u].works.clear();
}

void Zero3Schedule::free(size_t u) {
  Unit& unit = units_[u];
  if (!unit.gathered || held_ > 0) return;
  wait(u, false);  // a prefetch that was never used: the communicator must not write into freed bytes
  for (size_t b : unit.buckets) full_[b].storage()->release();  // GPU: ordered after the kernels reading it
  unit.gathered = false;
}

void Zero3Schedule::free_all() {
  for (size_t u = 0; u < units_.size(); ++u) free(u);
}

void Zero3Schedule::hold(bool on) {
  held_ += on ? 1 : -1;
  if (on)
    for (size_t u = 0; u < units_.size(); ++u) gather(u), wait(u, false);
  else if (held_ == 0)
    free_all();
}

int64_t zero3_working_set(const Zero3Schedule& s) {
  int64_t always = 0;
  std::vector<int64_t> others;
  for (size_t u = 0; u < s.units().size(); ++u) {
    int64_t n = 0;
    for (size_t b : s.units()[u].buckets) n += s.full(b).numel();
    if (u == 0 || (s.traced() && s.units()[u].pinned)) always += n;
    else others.push_back(n);
  }
  std::sort(others.rbegin(), others.rend());
  for (size_t k = 0; k <= s.prefetch() && k < others.size(); ++k) always += others[k];
  return always;
}

}  // namespace tandem::dist
