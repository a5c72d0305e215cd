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
// The lr can change between steps (set_lr, driven by optim/lr_schedule.h). The update is
// elementwise, so a segment (optim/optimizer.h, ZeRO) updates like the same elements of the whole
// parameter. State: "<name>.momentum_buffer" (momentum != 0), as PyTorch's state dict.
// Capturable (optim/optimizer.h): the CUDA kernel reads the LR, the found-inf flag and whether a
// buffer holds history (the slot's update count) from device memory. A step skipped on the device
// leaves a new buffer without history, so the next applied step is still its first (buf = d_p) -
// where PyTorch's fused SGD would read an uninitialised buffer (its is_first_step is a host flag).
// Leaves out: parameter groups (one lr for all), maximize, foreach/fused switches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "optim/sgd_options.h"  // defines: SGDOptions

namespace tandem::optim {

namespace kernels {
class SgdCudaTable;  // optim/cuda/sgd.cu: the cached device chunk table
}


class SGD : public Optimizer {
 public:
  // Parameters with their names (Module::named_parameters()); the names key the state.
  SGD(NamedTensors named_params, SGDOptions opt);
  // Unnamed parameters are named "0", "1", ... in order.
  SGD(const std::vector<Tensor>& params, SGDOptions opt);
  // Segments of parameters (ZeRO); num_params: see optim/optimizer.h.
  SGD(std::vector<ParamSegment> segments, int64_t num_params, SGDOptions opt);
  ~SGD() override;

  const char* name() const override { return "SGD"; }
  bool capturable() const override { return true; }
  SGDOptions options() const;  // with the current lr

 private:
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
  bool has_step_count() const override { return false; }
  bool uses_step_count() const override { return opt_.momentum != 0; }  // momentum history, unsaved
  void update(std::vector<Slot*>& active, const Tensor& found_inf) override;
  void lr_changed() override;  // CUDA: the kernels' device-side LR (optim/cuda/sgd.cu)
  void step_cpu(Slot& s);
  void step_cuda(std::vector<Slot*>& slots, const Tensor& found_inf);
  SGDOptions opt_;  // lr lives in Optimizer (set_lr)
  // One per (device, dtype) launch group, in first-seen order (CUDA builds only; empty until the
  // first GPU step): the chunk table, count list and device-side LR of that launch.
  std::vector<std::shared_ptr<kernels::SgdCudaTable>> cuda_tables_;
};

}  // namespace tandem::optim
