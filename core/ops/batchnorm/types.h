// core/ops/batchnorm/types.h: the batch-norm types that both the ops (batchnorm.h, batchnorm_relu.h)
// and their kernels (kernels.h) name, so that the kernel header need not include the ops' headers.
#pragma once
#include <cstdint>

namespace tandem::ops {

// What follows the normalisation inside one fused batch-norm call: nothing (ops::batch_norm),
// a ReLU (ops::batch_norm_relu: CUDNN_BATCHNORM_OPS_BN_ACTIVATION) or a residual add and a ReLU
// (ops::batch_norm_add_relu: CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION).
enum class BatchNormTail { None, Relu, AddRelu };

// How often cuDNN's batch norm ran, per direction and op, since the process started, and how often
// it refused a problem so that tandem's kernels ran instead (each kind of refusal is also noted
// once on stderr). All zero in CPU-only builds. The GPU tests read it so that a silent fallback
// cannot pass as a checked cuDNN path; bench_ops and the trainer may print it.
struct BatchNormCudnnStats {
  int64_t forward = 0;         // CUDNN_BATCHNORM_OPS_BN forward calls
  int64_t forward_fused = 0;   // CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION forward calls
  int64_t backward = 0;        // CUDNN_BATCHNORM_OPS_BN backward calls
  int64_t backward_fused = 0;  // CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION backward calls
  int64_t fallbacks = 0;       // refusals (either direction) that ran tandem's kernels
  int64_t forward_relu = 0;    // CUDNN_BATCHNORM_OPS_BN_ACTIVATION forward calls (ops::batch_norm_relu)
  int64_t backward_relu = 0;   // CUDNN_BATCHNORM_OPS_BN_ACTIVATION backward calls
};

}  // namespace tandem::ops
