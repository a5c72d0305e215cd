// apps/encoder/param_groups.cpp: the two groups and their shared step, clip and state (see the header).
#include "apps/encoder/param_groups.h"

#include <algorithm>
#include <set>

#include "optim/clip.h"  // defines: clip_grad_norm

namespace tandem::apps::encoder {

bool no_weight_decay(const std::string& name) {
  const std::string bias = ".bias";
  const bool is_bias = name.size() >= bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0;
  return is_bias || name.find("LayerNorm") != std::string::npos;
}

ParamGroups::ParamGroups(const std::string& kind, const optim::NamedTensors& params,
                         const optim::OptimizerOptions& opt) {
  optim::NamedTensors decay;
  for (const auto& [name, p] : params) (no_weight_decay(name) ? no_decay_params_ : decay).emplace_back(name, p);
  optim::OptimizerOptions nd = opt;
  nd.weight_decay = 0.0;
  decay_ = optim::make_optimizer(kind, std::move(decay), opt);
  no_decay_ = optim::make_optimizer(kind, no_decay_params_, nd);
}

void ParamGroups::set_lr(double lr) { decay_->set_lr(lr), no_decay_->set_lr(lr); }
void ParamGroups::zero_grad() { decay_->zero_grad(), no_decay_->zero_grad(); }
void ParamGroups::step() { decay_->step(), no_decay_->step(); }

double ParamGroups::clip_grad_norm(double max_norm) const {
  std::vector<Tensor> grads = decay_->grads();
  for (Tensor& g : no_decay_->grads()) grads.push_back(g);
  return optim::clip_grad_norm(grads, max_norm);
}

optim::NamedTensors ParamGroups::state() const {
  optim::NamedTensors s = decay_->state();
  for (auto& e : no_decay_->state()) s.push_back(std::move(e));
  return s;
}

void ParamGroups::load_state(const optim::NamedTensors& state) {
  std::set<std::string> nd;
  for (const auto& [name, p] : no_decay_params_) nd.insert(name);
  optim::NamedTensors a, b;
  for (const auto& [key, t] : state) {
    const std::string param = key.substr(0, key.rfind('.'));  // "<param>.exp_avg" -> "<param>"
    (nd.count(param) ? b : a).emplace_back(key, t);
  }
  decay_->load_state(a);
  no_decay_->load_state(b);
}

}  // namespace tandem::apps::encoder
