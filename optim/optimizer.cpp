// optim/optimizer.cpp: the segment bookkeeping shared by every optimizer - building segments,
// fetching and checking gradients, and state in and out by canonical name (see optim/optimizer.h).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/profile.h"

namespace tandem::optim {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(NamedTensors named_params, double lr) : lr_(lr) {
  for (auto& [name, p] : named_params) {
    const size_t position = slots_.size();
    add_slot({name, p, Tensor(), 0, -1, static_cast<int64_t>(position)}, p, position);
  }
  num_params_ = static_cast<int64_t>(slots_.size());
}

Optimizer::Optimizer(std::vector<ParamSegment> segments, int64_t num_params, double lr)
    : lr_(lr), num_params_(num_params) {
  TANDEM_CHECK(num_params >= static_cast<int64_t>(0), "optimizer: num_params must be >= 0, got ", num_params);
  for (size_t i = 0; i < segments.size(); ++i) add_slot(std::move(segments[i]), Tensor(), i);
}

void Optimizer::add_slot(ParamSegment seg, Tensor whole, size_t position) {
  const Tensor& p = seg.param;
  TANDEM_CHECK(p.defined() && is_floating(p.dtype()), "optimizer: parameter \"", seg.name,
               "\" is not a floating tensor");
  if (seg.low.defined())
    TANDEM_CHECK(p.dtype() == DType::F32 && (seg.low.dtype() == DType::BF16 || seg.low.dtype() == DType::F16) &&
                     seg.low.numel() == p.numel() && seg.low.device() == p.device(),
                 "optimizer: the 16-bit copy of \"", seg.name, "\" must be a contiguous f16/bf16 tensor of the f32 "
                 "parameter's size on its device, got ", seg.low.str(), " for ", p.str(),
                 " (build the optimizer from optim::MasterWeights::master_segments())");
  if (seg.param_numel < 0) seg.param_numel = p.numel();
  if (seg.param_index < 0) seg.param_index = static_cast<int64_t>(position);
  TANDEM_CHECK(seg.offset >= 0 && seg.offset + p.numel() <= seg.param_numel, "optimizer: segment of \"", seg.name,
               "\" covers elements [", seg.offset, ", ", seg.offset + p.numel(), ") outside its parameter of ",
               seg.param_numel, " elements");
  if (!whole.defined())
    TANDEM_CHECK(seg.param_index < num_params_, "optimizer: segment of \"", seg.name, "\" has param_index ",
                 seg.param_index, " but num_params is ", num_params_, "; pass the length of the full parameter list");
  for (const auto& s : slots_) {
    if (s.seg.name != seg.name) continue;
    TANDEM_CHECK(!whole.defined(), "optimizer: two parameters are both named \"", seg.name, "\"");
    const bool disjoint = seg.offset + p.numel() <= s.seg.offset || s.seg.offset + s.seg.param.numel() <= seg.offset;
    TANDEM_CHECK(disjoint && s.seg.param_numel == seg.param_numel && s.seg.param_index == seg.param_index,
                 "optimizer: two segments of \"", seg.name, "\" overlap or disagree on the parameter's size or index");
  }
  Slot s;
  s.seg = std::move(seg);
  s.whole = std::move(whole);
  slots_.push_back(std::move(s));
}

void Optimizer::set_lr(double lr) {
  TANDEM_CHECK(lr >= 0, name(), ": lr must be >= 0, got ", lr, " (check the LR schedule's settings)");
  lr_ = lr;
  lr_changed();
}

void Optimizer::step() { step(Tensor()); }

void Optimizer::step(const Tensor& found_inf) {
  profile::Range range("optimizer.step");
  if (found_inf.defined())
    TANDEM_CHECK(found_inf.numel() == 1 && found_inf.dtype() == DType::F32, name(),
                 "::step: found_inf must be a one-element f32 tensor (the loss scaler's found_inf()), got ",
                 found_inf.str());
  std::vector<Slot*> active;
  for (auto& s : slots_) {
    Tensor g = s.whole.defined() ? s.whole.grad() : s.seg.grad;
    if (!g.defined()) continue;  // unused this step (PyTorch skips p.grad is None)
    const Tensor& p = s.seg.param;
    const bool shape_ok = s.whole.defined() ? g.shape() == p.shape() : g.numel() == p.numel();
    TANDEM_CHECK(shape_ok && g.dtype() == p.dtype() && g.device() == p.device(), name(), ": gradient ", g.str(),
                 " of \"", s.seg.name, "\" does not match its parameter ", p.str());
    TANDEM_CHECK(!found_inf.defined() || found_inf.device() == p.device(), name(), "::step: found_inf is on ",
                 found_inf.device().str(), " but \"", s.seg.name, "\" on ", p.device().str(),
                 "; keep the flag on the parameters' device");
    for (auto& b : s.bufs)
      if (b.defined() && b.device() != p.device()) b = b.to(p.device());
    if (s.step.defined() && s.step.device() != p.device()) s.step = s.step.to(p.device());
    // Allocated at the first step, as the buffers: before a graph capture, which runs eager steps first.
    if (uses_step_count() && !s.step.defined()) s.step = Tensor::zeros({}, DType::F32, p.device());
    s.grad = g;
    active.push_back(&s);
  }
  if (!active.empty()) update(active, found_inf);
  for (auto* s : active) s->grad = Tensor();  // hold no gradient between steps
  ++steps_;
}

bool Optimizer::skipped_on_cpu(const Tensor& found_inf) {
  return found_inf.defined() && *found_inf.data<float>() != 0.0f;
}

const float* Optimizer::flag_ptr(const Tensor& found_inf) {
  return found_inf.defined() ? static_cast<const float*>(found_inf.data_ptr()) : nullptr;
}

int64_t Optimizer::count_of(const Slot& s) { return s.step.defined() ? std::llround(s.step.item()) : 0; }

void Optimizer::zero_grad() {
  for (auto& s : slots_) {
    Tensor g = s.whole.defined() ? s.whole.grad() : s.seg.grad;
    if (g.defined()) g.zero_();
  }
}

std::vector<Tensor> Optimizer::grads() const {
  std::vector<Tensor> out;
  for (const auto& s : slots_) {
    Tensor g = s.whole.defined() ? s.whole.grad() : s.seg.grad;
    if (g.defined()) out.push_back(g);
  }
  return out;
}

void Optimizer::set_grads(const std::vector<Tensor>& grads) {
  TANDEM_CHECK(grads.size() == slots_.size(), name(), "::set_grads: got ", grads.size(), " gradients for ",
               slots_.size(), " segments");
  for (size_t i = 0; i < grads.size(); ++i) {
    TANDEM_CHECK(!slots_[i].whole.defined(), name(),
                 "::set_grads: this optimizer reads param.grad(); set the parameters' gradients instead");
    slots_[i].seg.grad = grads[i];
  }
}

namespace {
Tensor step_tensor(int64_t step) { return Tensor::full({}, static_cast<double>(step), DType::F32); }
}  // namespace

std::vector<StateSlice> Optimizer::state_slices() const {
  const auto names = state_names();
  std::vector<StateSlice> out;
  for (const auto& s : slots_) {
    const bool any = std::any_of(s.bufs.begin(), s.bufs.end(), [](const Tensor& b) { return b.defined(); });
    // No update applied yet (none, or only device-skipped ones, whose buffers hold no history): fresh.
    const int64_t count = uses_step_count() ? count_of(s) : -1;
    if (count == 0) continue;
    if (has_step_count()) out.push_back({s.seg.name + ".step", 0, 1, step_tensor(count)});
    if (!any) continue;
    for (size_t k = 0; k < names.size(); ++k)
      if (k < s.bufs.size() && s.bufs[k].defined())
        out.push_back({s.seg.name + "." + names[k], s.seg.offset, s.seg.param_numel, s.bufs[k]});
  }
  return out;
}

NamedTensors Optimizer::state() const {
  for (const auto& s : slots_)
    TANDEM_CHECK(s.seg.offset == 0 && s.seg.param.numel() == s.seg.param_numel, name(),
                 "::state: this optimizer holds only part of \"", s.seg.name,
                 "\"; gather state_slices() from every rank and join them with assemble_state()");
  NamedTensors out;
  for (auto& slice : state_slices()) out.emplace_back(slice.key, slice.value);
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  const auto names = state_names();
  for (auto& s : slots_) {
    s.bufs.clear();
    s.step = Tensor();
  }
  // Which entries each parameter got, to reject a partial set (e.g. exp_avg without its step).
  std::map<std::string, size_t> seen;
  for (const auto& [key, t] : state) {
    int k = -2;  // index into names; -1 = ".step"
    std::string pname;
    auto ends_with = [&](const std::string& suffix) {
      return key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    for (size_t i = 0; i < names.size(); ++i)
      if (ends_with("." + names[i])) k = static_cast<int>(i), pname = key.substr(0, key.size() - names[i].size() - 1);
    if (has_step_count() && ends_with(".step")) k = -1, pname = key.substr(0, key.size() - 5);
    std::string expected;
    for (const auto& n : names) expected += " \"<param name>." + n + "\"";
    if (has_step_count()) expected += " \"<param name>.step\"";
    TANDEM_CHECK(k != -2, name(), "::load_state: unexpected key \"", key, "\" (expected", expected, ")");
    bool found = false;
    for (auto& s : slots_) {
      if (s.seg.name != pname) continue;
      found = true;
      if (k == -1) {
        TANDEM_CHECK(t.numel() == 1, name(), "::load_state: \"", key, "\" must hold one value, got ", t.str());
        const double count = static_cast<double>(std::llround(t.to(Device::cpu()).item()));
        s.step = Tensor::full({}, count, DType::F32, s.seg.param.device());
        continue;
      }
      TANDEM_CHECK(t.numel() == s.seg.param_numel, name(), "::load_state: \"", key, "\" has ", t.str(),
                   " but the parameter has ", s.seg.param_numel, " elements");
      Tensor src = t.detach().view({-1}).slice(s.seg.offset, s.seg.offset + s.seg.param.numel());
      if (src.dtype() != s.seg.param.dtype()) src = src.to(s.seg.param.dtype());
      Tensor buf = Tensor::empty_like(s.seg.param);
      buf.copy_(src.view(buf.shape()));
      s.bufs.resize(names.size());
      s.bufs[static_cast<size_t>(k)] = buf;
    }
    // A shard (built from segments) holds only some parameters and skips the others' entries.
    const bool sharded = !slots_.empty() && !slots_[0].whole.defined();
    TANDEM_CHECK(found || sharded, name(), "::load_state: no parameter named \"", pname,
                 "\"; was the checkpoint written for another model?");
    seen[pname] += 1;
  }
  // An optimizer that counts without saving the count (SGD's momentum history): a loaded buffer
  // holds history, so it counts as one update applied.
  if (uses_step_count() && !has_step_count())
    for (auto& s : slots_)
      if (!s.bufs.empty()) s.step = Tensor::full({}, 1.0, DType::F32, s.seg.param.device());
  const size_t per_param = names.size() + (has_step_count() ? 1 : 0);
  for (const auto& [pname, n] : seen)
    TANDEM_CHECK(!has_step_count() || n == per_param, name(), "::load_state: \"", pname, "\" has ", n, " of its ",
                 per_param, " state entries; a checkpoint holds all of them or none");
}

NamedTensors assemble_state(const std::vector<StateSlice>& slices) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const StateSlice*>> by_key;
  for (const auto& s : slices) {
    if (!by_key.count(s.key)) order.push_back(s.key);
    by_key[s.key].push_back(&s);
  }
  NamedTensors out;
  for (const auto& key : order) {
    const auto& parts = by_key[key];
    const int64_t n = parts[0]->full_numel;
    Tensor full = Tensor::empty({n}, parts[0]->value.dtype());
    std::vector<char> covered(static_cast<size_t>(n), 0);
    for (const auto* p : parts) {
      const int64_t len = p->value.numel();
      TANDEM_CHECK(p->full_numel == n && p->offset >= 0 && p->offset + len <= n && p->value.dtype() == full.dtype(),
                   "assemble_state: the slices of \"", key, "\" disagree on the size or dtype of the tensor");
      Tensor host = p->value.detach().to(Device::cpu()).view({-1});
      Tensor dst = full.slice(p->offset, p->offset + len);
      for (int64_t i = p->offset; i < p->offset + len; ++i) {
        if (covered[static_cast<size_t>(i)])
          TANDEM_CHECK(key.size() > 5 && key.compare(key.size() - 5, 5, ".step") == 0 &&
                           dst.to_vector_f64() == host.to_vector_f64(),
                       "assemble_state: two slices of \"", key, "\" overlap at element ", i);
        covered[static_cast<size_t>(i)] = 1;
      }
      dst.copy_(host);
    }
    const auto gap = std::find(covered.begin(), covered.end(), 0);
    TANDEM_CHECK(gap == covered.end(), "assemble_state: no slice of \"", key, "\" covers element ",
                 gap - covered.begin(), "; gather the slices of every rank");
    out.emplace_back(key, full);
  }
  return out;
}

}  // namespace tandem::optim
