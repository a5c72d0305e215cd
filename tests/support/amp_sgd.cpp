// tests/support/amp_sgd.cpp: see amp_sgd.h.
#include "tests/support/amp_sgd.h"

namespace tandem::testing {

AmpSgd amp_sgd(Module& model, DType low, double lr, double momentum, double weight_decay) {
  auto named = model.named_parameters();
  auto master = std::make_unique<optim::MasterWeights>(optim::segments_from_parameters(named));
  optim::OptimizerOptions oo;
  oo.lr = lr;
  oo.momentum = momentum;
  oo.weight_decay = weight_decay;
  auto opt = optim::make_optimizer("sgd", master->master_segments(), static_cast<int64_t>(named.size()), oo);
  optim::LossScalerOptions so;
  so.enabled = low == DType::F16;
  return AmpSgd{std::move(master), std::move(opt), optim::LossScaler(so)};
}

}  // namespace tandem::testing
