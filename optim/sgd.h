// optim/sgd.h: stochastic gradient descent with momentum, dampening, Nesterov and weight decay,
// exactly torch.optim.SGD's update (maximize = False):
//
//   d_p = g + weight_decay * p
//   buf = d_p                                   (first step of this parameter)
//   buf = momentum * buf + (1 - dampening) * d_p (later steps)
//   d_p = d_p + momentum * buf    if nesterov, else d_p = buf      (only when momentum != 0)
//   p  -= lr * d_p
//
// Parameters whose .grad is undefined are skipped (their buffer is untouched), as in PyTorch.
// CPU: a plain loop per tensor in f32/f64 (optim/cpu/sgd.cpp). CUDA: one fused multi-tensor launch per
// step over every parameter (optim/cuda/sgd.cu); param, grad and buffer share a dtype, math is in f32.
// The lr can change between steps (set_lr, driven by optim/lr_schedule.h).
// Leaves out: parameter groups (one lr for all), maximize, foreach/fused switches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tandem::optim {

namespace kernels {
class SgdCudaTable;  // optim/cuda/sgd.cu: the cached device chunk table
}

// Defaults are torch.optim.SGD's, except lr, which PyTorch requires and ImageNet recipes set to 0.1
// for batch 256 (Goyal et al.).
struct SGDOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0 (PyTorch's rule)
};

class SGD {
 public:
  SGD(const SGD&) = delete;
  SGD& operator=(const SGD&) = delete;
  // Parameters with their names (Module::named_parameters()); the names key the state.
  SGD(std::vector<std::pair<std::string, Tensor>> named_params, SGDOptions opt);
  // Unnamed parameters are named "0", "1", ... in order.
  SGD(const std::vector<Tensor>& params, SGDOptions opt);

  void step();
  void zero_grad();  // zeroes existing .grad buffers in place
  void set_lr(double lr) { opt_.lr = lr; }
  double lr() const { return opt_.lr; }
  const SGDOptions& options() const { return opt_; }
  int64_t steps() const { return steps_; }

  // The momentum buffers, named "<param name>.momentum_buffer", for parameters that have one
  // (none before the first step, or with momentum == 0). The tensors are the live buffers.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Copies buffers in by name (shapes must match their parameters); parameters not named keep no
  // buffer, so their next step starts fresh (buf = d_p), as after PyTorch's load_state_dict.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  struct Slot {
    std::string name;
    Tensor param;
    Tensor buf;  // undefined until the first step with a gradient
  };
  void step_cpu(Slot& s);
  void step_cuda(std::vector<Slot*>& slots);
  std::vector<Slot> slots_;
  SGDOptions opt_;
  int64_t steps_ = 0;
  std::shared_ptr<kernels::SgdCudaTable> cuda_table_;  // CUDA builds only; null until the first GPU step
};

}  // namespace tandem::optim
