// optim/clip.h: global gradient-norm clipping, torch.nn.utils.clip_grad_norm_ (norm_type = 2):
//
//   total_norm = sqrt(sum over all gradients of sum(g^2))
//   scale      = max_norm / (total_norm + 1e-6)     (1e-6: PyTorch's guard against dividing by 0)
//   every g   *= scale, only when scale < 1;  returns total_norm (before clipping)
//
// Which norm: under DDP every rank holds the same averaged gradients, so the local norm is the
// global one (no hook). Under ZeRO each rank holds a shard: pass its shard gradients and a hook that
// all-reduces (sums) the one-element vector of squares, so every rank clips by the same norm.
// Non-finite norms (an overflowed fp16 step) leave the gradients untouched and are returned as they
// are: the loss scaler skips that step anyway (PyTorch would fill the gradients with NaN).
// CUDA: a multi-tensor device reduction per (device, dtype) group and one read of its f32 total -
// the only host sync - then one fused scaling launch per group (optim/cuda/clip.cu). CPU: f64 sums.
// Undefined tensors in `grads` are skipped.
//
// GradClipper: the same inside a captured step (core/cuda/graph.h), with no host read. The norm
// stays on the device (norm(), f32 [1]), a one-thread kernel turns it into the coefficient
// min(1, max_norm / (norm + 1e-6)) - 1 also where the norm is not finite - and the scaling kernels
// read the coefficient from device memory. Under ZeRO its DeviceSumReduce all-reduces the sum of
// squares on the device (NCCL) instead of SumSquaresReduce's host round trip. Results: on one
// device and one dtype (the AMP masters: f32) the clipped gradients and the norm are bitwise the
// host API's - the same per-dtype f32 totals on CUDA, then sqrt and the coefficient in f64 and
// rounded once, as the host code does; with several dtypes the f64 sum of the per-dtype totals is
// rounded to f32 before the square root (a relative 2^-24 on the norm). On the CPU it runs the host
// code's f64 loops and writes the norm tensor. The chunk tables are kept between calls, so one
// GradClipper serves one list of gradients (it may change between eager calls, not in a capture).
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace tandem::optim {

namespace kernels {
class DeviceTable;  // optim/cuda/multi_tensor.cuh
}

// The global L2 norm of `grads` (through `reduce` when sharded).
double grad_norm(const std::vector<Tensor>& grads, const SumSquaresReduce& reduce = {});
// Clips in place; returns the norm before clipping. max_norm must be > 0.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const SumSquaresReduce& reduce = {});
// The gradients the optimizer will use (param.grad() or its segments' gradients).
double clip_grad_norm(const Optimizer& opt, double max_norm, const SumSquaresReduce& reduce = {});

// The capturable clip_grad_norm (see the file comment).
class GradClipper {
 public:
  // max_norm > 0. reduce: sums the squares across ranks on the device (ZeRO); null: local = global.
  explicit GradClipper(double max_norm, DeviceSumReduce reduce = {});
  // Computes the global norm of `grads` (all on one device; undefined ones skipped) into norm() and,
  // where it is finite and max_norm / (norm + 1e-6) < 1, scales them by that, on their device.
  void clip(const std::vector<Tensor>& grads);
  void clip(const Optimizer& opt) { clip(opt.grads()); }
  // f32 [1] on the gradients' device: the last clip's norm before clipping (undefined before the
  // first call). Reading it is a device sync: for reports.
  const Tensor& norm() const { return norm_; }
  double max_norm() const { return max_norm_; }

 private:
  double max_norm_;
  DeviceSumReduce reduce_;
  Tensor sum_sq_;  // what reduce_ gets: f32 [1] on CUDA, f64 [1] on the CPU
  Tensor norm_;    // f32 [1]
  Tensor coef_;    // CUDA: f32 [1], the coefficient the scaling kernels read (1: leave alone)
  std::map<DType, std::shared_ptr<kernels::DeviceTable>> sum_tables_, scale_tables_;  // per dtype group
};

}  // namespace tandem::optim
