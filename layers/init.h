// layers/init.h: weight initialisation - PyTorch's torch.nn.init formulas and the model schemes of
// torchvision (ResNet, VGG) built on them.
//
// All draws come from a tandem::Generator, so a given seed gives the same weights on every rank and
// device (core/random.h); DDP still broadcasts from rank 0, this just makes that a no-op. Values
// match PyTorch's distributions, not its random streams (no bitwise match with torch.manual_seed).
// Whole-model schemes walk Module::named_modules() (pre-order, registration order), so the draw
// order, and therefore the weights, depend only on the model's structure and the seed.
#pragma once
#include <cstdint>
#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace tandem::init {

enum class FanMode { FanIn, FanOut };

// torch.nn.init.calculate_gain for "relu" (sqrt 2) and "leaky_relu" with slope a (sqrt(2/(1+a^2))).
double gain_relu();
double gain_leaky_relu(double a);

// U(-bound, bound), bound = gain * sqrt(3 / fan). With gain_leaky_relu(sqrt(5)) and fan_in, this is
// PyTorch's default Linear/Conv weight init: bound = 1/sqrt(fan_in).
void kaiming_uniform_(Tensor& w, int64_t fan, double gain, Generator& gen);
// N(0, std), std = gain / sqrt(fan).
void kaiming_normal_(Tensor& w, int64_t fan, double gain, Generator& gen);
// PyTorch's default bias init for Linear/Conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_bias_(Tensor& b, int64_t fan_in, Generator& gen);

// Every module's own default init (Module::reset_parameters), in module order.
void default_init(Module& model, Generator& gen);

// torchvision ResNet.__init__: every Conv2d gets kaiming_normal_(mode="fan_out", relu); every
// BatchNorm2d weight 1, bias 0; Linear layers keep their defaults (drawn here). With
// zero_init_residual, the last BN of each residual branch (bn2 of BasicBlock, bn3 of Bottleneck,
// i.e. a module named "bn2"/"bn3" inside a block) starts at weight 0, so each block starts as the
// identity (Goyal et al., "ImageNet in 1 hour").
void resnet_init(Module& model, Generator& gen, bool zero_init_residual = false);

// torchvision VGG._initialize_weights: Conv2d kaiming_normal_(fan_out, relu) with bias 0;
// BatchNorm2d weight 1, bias 0; Linear N(0, 0.01) with bias 0.
void vgg_init(Module& model, Generator& gen);

}  // namespace tandem::init
