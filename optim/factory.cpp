// optim/factory.cpp: make_optimizer - an optimizer from its command-line name (see optim/optimizer.h).
#include "core/check.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/sgd.h"

namespace tandem::optim {

namespace {
SGDOptions sgd_options(const OptimizerOptions& o) {
  SGDOptions s;
  s.lr = o.lr.value_or(s.lr);
  s.momentum = o.momentum;
  s.dampening = o.dampening;
  s.nesterov = o.nesterov;
  s.weight_decay = o.weight_decay.value_or(s.weight_decay);
  TANDEM_CHECK(!o.eps && o.beta1 == 0.9 && o.beta2 == 0.999, "SGD takes no betas or eps (those are AdamW's and "
               "LAMB's); use [momentum] instead");
  return s;
}

[[noreturn]] void unknown(const std::string& name) {
  TANDEM_THROW("unknown optimizer \"", name, "\"; valid names are: sgd, adamw, lamb");
}
}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedTensors named_params,
                                          const OptimizerOptions& opt) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(named_params), sgd_options(opt));
  if (name == "adamw") return std::make_unique<AdamW>(std::move(named_params), opt);
  if (name == "lamb") return std::make_unique<LAMB>(std::move(named_params), opt);
  unknown(name);
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamSegment> segments,
                                          int64_t num_params, const OptimizerOptions& opt) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(segments), num_params, sgd_options(opt));
  if (name == "adamw") return std::make_unique<AdamW>(std::move(segments), num_params, opt);
  if (name == "lamb") return std::make_unique<LAMB>(std::move(segments), num_params, opt);
  unknown(name);
}

}  // namespace tandem::optim
