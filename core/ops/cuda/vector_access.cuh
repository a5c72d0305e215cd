// core/ops/cuda/vector_access.cuh: 16-byte vector loads/stores and grid-stride indices for the
// bandwidth-bound maps (elementwise.cu, fused_bias.cu; internal, CUDA only).
//
// A Vec<T> is 16 bytes (4 f32 or 8 f16/bf16 elements), so one access is one LDG.128/STG.128. It
// may only be used on 16-byte aligned pointers: tensors from the allocator are 256-byte aligned,
// views at odd offsets are not, and the callers fall back to a scalar loop (aligned16 says which).
#pragma once
#include <cstdint>

namespace tandem::cuda {

template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));
template <typename T>
struct alignas(16) Vec {
  T v[kVec<T>];
};

// True for a 16-byte aligned pointer (and for nullptr: an absent operand never blocks the vector path).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ long long thread_index() { return blockIdx.x * (long long)blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

}  // namespace tandem::cuda
