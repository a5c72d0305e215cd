// core/ops/common/cuda/dnn_handle.h: per-device cuDNN handle bound to the compute stream (CUDA builds only).
//
// The handle is created on first use on the current device and bound with cudnnSetStream to that
// device's compute stream (core/cuda/context.h), so every cuDNN call is ordered with tandem's own
// kernels without host syncs. Nothing else may rebind its stream.
#pragma once
#include <cudnn.h>

namespace tandem::cuda {

cudnnHandle_t dnn_handle();  // of the current device

}  // namespace tandem::cuda
