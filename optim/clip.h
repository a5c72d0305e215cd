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
#pragma once
#include <vector>

#include "optim/optimizer.h"

namespace tandem::optim {

// The global L2 norm of `grads` (through `reduce` when sharded).
double grad_norm(const std::vector<Tensor>& grads, const SumSquaresReduce& reduce = {});
// Clips in place; returns the norm before clipping. max_norm must be > 0.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, const SumSquaresReduce& reduce = {});
// The gradients the optimizer will use (param.grad() or its segments' gradients).
double clip_grad_norm(const Optimizer& opt, double max_norm, const SumSquaresReduce& reduce = {});

}  // namespace tandem::optim
