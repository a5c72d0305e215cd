// core/ops/common/cuda/vector_access.cuh: 16-byte vector loads/stores and grid-stride indices for the
// bandwidth-bound maps (elementwise/cuda.cu, fused_bias/cuda.cu; internal, CUDA only).
//
// A Vec<T> is 16 bytes (4 f32 or 8 f16/bf16 elements), so one access is one LDG.128/STG.128. It
// may only be used on 16-byte aligned pointers: tensors from the allocator are 256-byte aligned,
// views at odd offsets are not, and the callers fall back to a scalar loop (vector_path_ok in
// vector_width.h says which; it is host code with a CPU test).
#pragma once
#include <cstdint>

#include "core/ops/common/cuda/vector_width.h"

namespace tandem::cuda {

template <typename T>
constexpr int kVec = static_cast<int>(vector_width(sizeof(T)));
template <typename T>
struct alignas(16) Vec {
  T v[kVec<T>];
};

__device__ __forceinline__ long long thread_index() { return blockIdx.x * (long long)blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

}  // namespace tandem::cuda
