// apps/trainer/step/ema.cpp: the EMA of the weights (see ema.h).
#include "apps/trainer/step/ema.h"

#include <map>
#include <set>

#include "core/autograd.h"                     // defines: NoGradGuard
#include "core/check.h"                        // defines: TANDEM_CHECK
#include "core/ops/copy/copy.h"                // defines: cast_raw
#include "core/ops/elementwise/elementwise.h"  // defines: axpby_

namespace tandem::trainer {

std::optional<std::string> ema_refusal(const StepOptions& o) {
  const std::string ema = option_name(o.names, "model_ema");
  if (o.strategy == Strategy::Zero3)
    return ema + " averages the whole weights on every rank, and " + option_name(o.names, "strategy", "zero3") +
           " keeps only each rank's shard of them between steps: use " + option_name(o.names, "strategy", "zero2") +
           " (or 1), or drop " + ema;
  if (o.strategy == Strategy::ParameterServer)
    return ema + " averages the weights after each update, and " + option_name(o.names, "strategy", "ps") +
           " updates them on its servers: use DDP or ZeRO-1/2, or drop " + ema;
  return std::nullopt;
}

ModelEma::ModelEma(Module& model, double decay) : model_(model), decay_(decay) {
  TANDEM_CHECK(decay > 0 && decay < 1, "ModelEma: the decay must be in (0, 1), got ", decay);
  const std::vector<std::string> convs = conv_weight_names(model);
  const std::set<std::string> conv(convs.begin(), convs.end());
  autograd::NoGradGuard ng;
  for (const auto& [name, p] : model.named_parameters()) {
    names_.push_back(name);
    params_.push_back(p);
    const DType keep = p.dtype() == DType::F16 || p.dtype() == DType::BF16 ? DType::F32 : p.dtype();
    average_.push_back(keep == p.dtype() ? p.detach().clone() : ops::cast_raw(p.detach(), keep));
    conv_.push_back(conv.count(name) > 0);
  }
}

void ModelEma::update() {
  autograd::NoGradGuard ng;
  const float keep = static_cast<float>(decay_), take = static_cast<float>(1.0 - decay_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor p = params_[i].detach();
    ops::axpby_(average_[i], p.dtype() == average_[i].dtype() ? p : ops::cast_raw(p, average_[i].dtype()), keep, take);
  }
}

NamedTensors ModelEma::state() const {
  NamedTensors s;
  for (size_t i = 0; i < names_.size(); ++i)
    s.emplace_back(kPrefix + names_[i], conv_[i] ? ohwi_to_oihw(average_[i]) : average_[i]);
  return s;
}

NamedTensors ModelEma::take_state(NamedTensors& entries) {
  NamedTensors ema, rest;
  const std::string prefix = kPrefix;
  for (auto& e : entries) (e.first.rfind(prefix, 0) == 0 ? ema : rest).push_back(std::move(e));
  entries = std::move(rest);
  return ema;
}

void ModelEma::load_state(const NamedTensors& entries, const std::string& source) {
  std::map<std::string, Tensor> have;
  for (const auto& [n, t] : entries) have[n] = t;
  autograd::NoGradGuard ng;
  for (size_t i = 0; i < names_.size(); ++i) {
    auto it = have.find(kPrefix + names_[i]);
    TANDEM_CHECK(it != have.end(), source, " has an EMA of the weights (--model-ema) but none of ", names_[i],
                 ": the file does not belong to this model; resume without --model-ema to start a new average");
    Tensor t = conv_[i] && it->second.dim() == 4 ? oihw_to_ohwi(it->second) : it->second;
    TANDEM_CHECK(t.shape() == average_[i].shape(), source, ": the EMA of ", names_[i], " has shape ",
                 shape_str(t.shape()), " but the parameter ", shape_str(average_[i].shape()));
    average_[i].copy_(t.dtype() == average_[i].dtype() ? t : ops::cast_raw(t, average_[i].dtype()));
  }
}

int64_t ModelEma::bytes() const {
  int64_t n = 0;
  for (const Tensor& t : average_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

ModelEma::Applied::Applied(ModelEma& ema) : ema_(ema) {
  autograd::NoGradGuard ng;
  for (size_t i = 0; i < ema_.params_.size(); ++i) {
    Tensor p = ema_.params_[i].detach();
    saved_.push_back(p.clone());
    const Tensor& a = ema_.average_[i];
    p.copy_(a.dtype() == p.dtype() ? a : ops::cast_raw(a, p.dtype()));
  }
}

ModelEma::Applied::~Applied() {
  autograd::NoGradGuard ng;
  for (size_t i = 0; i < saved_.size(); ++i) {
    Tensor p = ema_.params_[i].detach();
    p.copy_(saved_[i]);
  }
}

}  // namespace tandem::trainer
