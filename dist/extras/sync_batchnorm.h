// dist/extras/sync_batchnorm.h: batch normalisation whose batch is the union of every rank's batch.
//
// Plain BatchNorm2d under DDP normalises each rank's b samples with their own statistics; with
// small per-rank batches (detection, segmentation, large models) those are noisy. SyncBatchNorm
// makes N ranks x batch b compute exactly what one process computes on the batch N*b:
//   forward:  per channel, the local sum, sum of squares and count are packed into one [2C+1]
//             vector and all-reduced; mean = S/n, biased var = Q/n - mean^2 over the global n;
//   backward: dx needs the global sums of dy and dy*xhat per channel: a second all-reduce [2C].
//             dweight/dbias are the LOCAL sums, like any parameter gradient: DDP averages them.
// Running stats are updated with the global statistics (unbiased var with the global n), so they
// agree on every rank. Eval mode, and a communicator of one rank, is plain ops::batch_norm.
// The all-reduces go through the communicator given at construction (DDP passes its own), which
// must take the activations' device and outlive the layer.
// Parameter and buffer names are BatchNorm2d's, so checkpoints load either way.
//
// Numerics: statistics and affine math run in the parameters' dtype (f32 for f32/f16/bf16
// activations, f64 for f64) and the output is cast back to the input's. The variance is
// E[x^2] - mean^2: cheap to all-reduce, but it loses digits when |mean| >> std (as PyTorch's
// sum-based kernels do); normalised activations are far from that regime. momentum and eps
// reach the ops as f32 scalars (0.1 is off by 1.5e-9 absolute, visible only in f64 runs).
// Collectives: every rank must run the same layers in the same order (DDP's rule). The backward
// all-reduce runs only when the input needs a gradient - the same on every rank.
// Left out: process groups (sync across a subset of ranks) and channels-first layouts.
#pragma once
#include "dist/communicator.h"
#include "layers/layers.h"

namespace tandem::dist {

// A BatchNorm2d (same parameters, buffers, eval path, batch counter and repr) whose training-mode
// statistics are taken over every rank's batch.
class SyncBatchNorm : public BatchNorm2d {
 public:
  SyncBatchNorm(int64_t num_features, Communicator& comm, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm2d(num_features, eps, momentum), comm_(&comm) {}
  // Takes over bn's parameters and buffers: the same tensors, not copies, so an optimizer or
  // checkpoint holding them keeps working.
  SyncBatchNorm(const BatchNorm2d& bn, Communicator& comm) : BatchNorm2d(ShareTensorsOf{bn}), comm_(&comm) {}
  std::string type_name() const override { return "SyncBatchNorm"; }

 protected:
  Tensor normalize_training(const Tensor& x) override;
  // forward_add_relu (ResNet's block tail): the synchronised BN above, then add and ReLU as
  // separate ops; cuDNN's fused op computes local statistics, so it runs only for one rank.
  Tensor normalize_training_add_relu(const Tensor& x, const Tensor& residual) override;
  // forward_relu (conv -> BN -> ReLU): likewise, the synchronised BN, then ReLU.
  Tensor normalize_training_relu(const Tensor& x) override;

 private:
  Communicator* comm_;  // not owned
};

// Replaces every BatchNorm2d in the tree by a SyncBatchNorm sharing its tensors (PyTorch's
// nn.SyncBatchNorm.convert_sync_batchnorm); returns the new module if `m` itself is one. Call it
// before or after initialisation (a SyncBatchNorm is a BatchNorm2d to the init schemes).
// DdpOptions::sync_batchnorm does this.
ModulePtr convert_sync_batchnorm(ModulePtr m, Communicator& comm);

}  // namespace tandem::dist
