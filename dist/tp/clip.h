// dist/tp/clip.h: global gradient-norm clipping for a tensor-parallel model.
//
// torch.nn.utils.clip_grad_norm_ over the canonical model's gradients, computed from the shards:
//   total^2 = (sum over split parameters of their squares, summed over the TP group)
//           + (sum over replicated parameters of their squares, once - every TP rank holds the same)
// so every rank of the group gets the canonical norm and clips by the same factor (optim/clip.h's
// rule: max_norm / (total + 1e-6), only when below 1). Summing the replicated squares over the
// group would count them T times: that is the mistake this function exists to avoid (Megatron's
// clip_grad_norm skips parameters that are "tensor-parallel duplicates" the same way).
// Under DDP over the DP groups the gradients are already averaged and identical across DP, so the
// TP group is all there is to sum over. Left out: ZeRO's DP-sharded gradients (its segments would
// also need Zero::sum_reduce over DP; the training step composes the two).
#pragma once
#include "dist/communicator.h"
#include "dist/tp/shard.h"
#include "layers/module.h"

namespace tandem::dist::tp {

// The canonical model's gradient norm, from this rank's shards. Collective over `tp`.
double grad_norm(const Module& model, const TpLayout& layout, Communicator& tp);
// Clips every gradient of `model` in place; returns the norm before clipping. max_norm > 0.
double clip_grad_norm(const Module& model, const TpLayout& layout, Communicator& tp, double max_norm);

}  // namespace tandem::dist::tp
