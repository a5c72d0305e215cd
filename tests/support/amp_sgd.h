// tests/support/amp_sgd.h: the AMP recipe the tests train with by hand (without the trainer's Step):
// a model already cast for AMP (layers/amp_cast.h), f32 master weights of its parameters, SGD with
// momentum over the masters, and a dynamic loss scale for fp16 only (bf16 has f32's range).
//
// tests/test_train_e2e.cpp (the CPU accuracy bar) and tests/gpu_amp_parity.cpp (CPU vs GPU) both
// step this way, so one copy keeps the two recipes the same. Step with optim::amp_step(*master,
// scaler, *opt, master->model_grads()).
#pragma once
#include <memory>

#include "core/dtype.h"
#include "layers/module.h"
#include "optim/amp.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace tandem::testing {

struct AmpSgd {
  std::unique_ptr<optim::MasterWeights> master;  // f32 copies of the model's parameters
  std::unique_ptr<optim::Optimizer> opt;         // SGD over the masters
  optim::LossScaler scaler;                      // enabled for F16 only
};

// `model`'s parameters must already be in `low` (cast_for_amp). lr, momentum and weight_decay are
// SGD's (optim::OptimizerOptions).
AmpSgd amp_sgd(Module& model, DType low, double lr, double momentum, double weight_decay = 0);

}  // namespace tandem::testing
