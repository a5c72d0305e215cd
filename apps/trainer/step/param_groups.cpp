// apps/trainer/step/param_groups.cpp: the two groups and their shared step, clip and state (see the header).
#include "apps/trainer/step/param_groups.h"

#include <algorithm>
#include <memory>
#include <set>

#include "optim/clip.h"  // defines: clip_grad_norm

namespace tandem::trainer {

bool bert_no_weight_decay(const std::string& name) {
  const std::string bias = ".bias";
  const bool is_bias = name.size() >= bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0;
  return is_bias || name.find("LayerNorm") != std::string::npos;
}

NoDecayRule norm_layer_parameters(const Module& model) {
  auto names = std::make_shared<std::set<std::string>>();
  for (const auto& [prefix, m] : model.named_modules()) {
    const std::string type = m->type_name();
    if (type != "BatchNorm2d" && type != "LayerNorm") continue;
    for (const auto& [name, p] : m->named_parameters()) names->insert(prefix.empty() ? name : prefix + "." + name);
  }
  return [names](const std::string& name) { return names->count(name) > 0; };
}

namespace {
optim::OptimizerOptions without_decay(optim::OptimizerOptions o) {
  o.weight_decay = 0.0;
  return o;
}
}  // namespace

ParamGroups::ParamGroups(const std::string& kind, const optim::NamedTensors& params,
                         const optim::OptimizerOptions& opt, const NoDecayRule& rule) {
  optim::NamedTensors decay, no_decay;
  for (const auto& [name, p] : params) (rule && rule(name) ? no_decay : decay).emplace_back(name, p);
  for (const auto& [name, p] : no_decay) no_decay_names_.push_back(name);
  decay_ = optim::make_optimizer(kind, std::move(decay), opt);
  no_decay_ = optim::make_optimizer(kind, std::move(no_decay), without_decay(opt));
}

ParamGroups::ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> segments, int64_t num_params,
                         const optim::OptimizerOptions& opt, const NoDecayRule& rule) {
  std::vector<optim::ParamSegment> decay, no_decay;
  for (optim::ParamSegment& s : segments) {
    const bool nd = rule && rule(s.name);
    seg_no_decay_.push_back(nd);
    if (nd && (no_decay_names_.empty() || no_decay_names_.back() != s.name)) no_decay_names_.push_back(s.name);
    (nd ? no_decay : decay).push_back(std::move(s));
  }
  // Positions (param_index -1) count within each group; a list-wide index keeps num_params.
  auto count = [&](const std::vector<optim::ParamSegment>& g) {
    return std::any_of(g.begin(), g.end(), [](const auto& s) { return s.param_index < 0; })
               ? static_cast<int64_t>(g.size()) : num_params;
  };
  const int64_t nd_count = count(no_decay), d_count = count(decay);
  decay_ = optim::make_optimizer(kind, std::move(decay), d_count, opt);
  no_decay_ = optim::make_optimizer(kind, std::move(no_decay), nd_count, without_decay(opt));
}

ParamGroups::ParamGroups(const std::string& kind, dist::Zero& zero, optim::OptimizerOptions opt,
                         const NoDecayRule& rule)
    : ParamGroups(kind, zero.segments(), zero, std::move(opt), rule) {
  gather_in_step_ = true;
}

ParamGroups::ParamGroups(const std::string& kind, std::vector<optim::ParamSegment> masters, dist::Zero& zero,
                         optim::OptimizerOptions opt, const NoDecayRule& rule)
    : ParamGroups(kind, std::move(masters), zero.num_params(), [&] {
        opt.norm_reduce = zero.sum_reduce();  // LAMB's per-parameter norms span every rank's shard
        return opt;
      }(), rule) {
  zero_ = &zero;
  // LAMB's step all-reduces its per-parameter norms, but an optimizer without segments skips its step
  // (optim/optimizer.h): a rank whose shard holds nothing of a group that other ranks hold would
  // leave them waiting. A group no rank holds (no rule: no_decay) is skipped by every rank alike.
  if (kind != "lamb") return;
  // {ranks, ranks whose decay group is empty, ranks whose no_decay group is empty}, summed: one
  // all-reduce, and every rank decides alike.
  std::vector<double> count{1.0, decay_->num_segments() == 0 ? 1.0 : 0.0, no_decay_->num_segments() == 0 ? 1.0 : 0.0};
  zero.sum_reduce()(count);
  const bool decay_split = count[1] > 0 && count[1] < count[0], no_decay_split = count[2] > 0 && count[2] < count[0];
  TANDEM_CHECK(!decay_split && !no_decay_split, "LAMB under ZeRO: on some rank the shard holds no ",
               decay_split ? "weight-decayed" : "no-weight-decay", " parameter while other ranks do, and LAMB's "
               "norms need every rank: use fewer ranks, larger buckets (StepOptions::bucket_mb) or AdamW");
}

void ParamGroups::set_lr(double lr) { decay_->set_lr(lr), no_decay_->set_lr(lr); }

void ParamGroups::zero_grad() {
  if (zero_) zero_->zero_grad(*decay_);  // stage 1: the whole buckets too
  else decay_->zero_grad();
  no_decay_->zero_grad();
}

void ParamGroups::step() {
  decay_->step(), no_decay_->step();
  if (gather_in_step_) zero_->gather_parameters();
}

void ParamGroups::step(const Tensor& found_inf) {
  decay_->step(found_inf), no_decay_->step(found_inf);
  if (gather_in_step_) zero_->gather_parameters();
}

std::vector<Tensor> ParamGroups::grads() const {
  std::vector<Tensor> grads = decay_->grads();
  for (Tensor& g : no_decay_->grads()) grads.push_back(g);
  return grads;
}

void ParamGroups::set_grads(const std::vector<Tensor>& grads) {
  TANDEM_CHECK(grads.size() == seg_no_decay_.size(), "ParamGroups::set_grads: got ", grads.size(),
               " gradients for ", seg_no_decay_.size(), " segments (only the segment constructors take them)");
  std::vector<Tensor> d, nd;
  for (size_t i = 0; i < grads.size(); ++i) (seg_no_decay_[i] ? nd : d).push_back(grads[i]);
  decay_->set_grads(d);
  no_decay_->set_grads(nd);
}

double ParamGroups::clip_grad_norm(double max_norm) const {
  return optim::clip_grad_norm(grads(), max_norm, zero_ ? zero_->sum_reduce() : optim::SumSquaresReduce{});
}

optim::NamedTensors ParamGroups::state() const {
  optim::NamedTensors s = zero_ ? zero_->gather_state(*decay_) : decay_->state();
  for (auto& e : zero_ ? zero_->gather_state(*no_decay_) : no_decay_->state()) s.push_back(std::move(e));
  return s;
}

int64_t ParamGroups::state_bytes() const {
  int64_t bytes = 0;
  for (const optim::Optimizer* o : {decay_.get(), no_decay_.get()})
    for (const optim::StateSlice& s : o->state_slices()) {
      const std::string step = ".step";
      const bool is_step = s.key.size() > step.size() && s.key.compare(s.key.size() - step.size(), step.size(), step) == 0;
      if (!is_step) bytes += static_cast<int64_t>(s.value.nbytes());
    }
  return bytes;
}

void ParamGroups::load_state(const optim::NamedTensors& state) {
  const std::set<std::string> nd(no_decay_names_.begin(), no_decay_names_.end());
  optim::NamedTensors a, b;
  for (const auto& [key, t] : state) {
    const std::string param = key.substr(0, key.rfind('.'));  // "<param>.exp_avg" -> "<param>"
    (nd.count(param) ? b : a).emplace_back(key, t);
  }
  decay_->load_state(a);
  no_decay_->load_state(b);
}

}  // namespace tandem::trainer
