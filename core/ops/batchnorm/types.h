// core/ops/batchnorm/types.h: the batch-norm struct that both the op (batchnorm.h) and its kernels
// (kernels.h) name, so that the kernel header need not include the op's header.
#pragma once
#include <cstdint>

namespace tandem::ops {

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
};

}  // namespace tandem::ops
