// core/ops/common/cuda/dispatch.cuh: dtype dispatch and float widening for CUDA kernels (internal).
//
// CUDA kernels load f16/bf16/f32, compute in float, and store back in the tensor's dtype: that is
// the accuracy contract the parity tests check. TANDEM_CUDA_FLOAT_TYPES(dtype, T, body) runs body
// with T = float, __half or __nv_bfloat16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/dtype.h"

namespace tandem::cuda {
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
}  // namespace tandem::cuda

#define TANDEM_CUDA_FLOAT_TYPES(dtype, T, ...)                                                         \
  [&] {                                                                                                \
    switch (dtype) {                                                                                   \
      case ::tandem::DType::F32: { using T = float; return __VA_ARGS__(); }                            \
      case ::tandem::DType::F16: { using T = __half; return __VA_ARGS__(); }                           \
      case ::tandem::DType::BF16: { using T = __nv_bfloat16; return __VA_ARGS__(); }                   \
      default:                                                                                         \
        TANDEM_THROW("CUDA kernels take f32, f16 or bf16, got ", ::tandem::dtype_name(dtype));         \
    }                                                                                                  \
  }()
