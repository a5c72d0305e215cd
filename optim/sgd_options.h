// optim/sgd_options.h: SGD's hyper-parameters, apart from the optimizer (optim/sgd.h) so that its
// kernels (optim/kernels/sgd.h) take them without including the optimizer that calls them.
#pragma once

namespace tandem::optim {

// Defaults are torch.optim.SGD's, except lr, which PyTorch requires and ImageNet recipes set to 0.1
// for batch 256 (Goyal et al.).
struct SGDOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0 (PyTorch's rule)
};

}  // namespace tandem::optim
