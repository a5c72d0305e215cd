// core/ops/dropout/cuda.cu: CUDA dropout over the shared mask rule (core/ops/dropout/functors.h).
// Loads widen to float, the scaling runs in float, stores narrow to the tensor's dtype; the mask
// itself depends only on (seed, offset + i), so it matches the CPU bit for bit. Inside a captured
// graph (slot set) each thread reads seed and base from the slot once, before its loop.
#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/dropout/functors.h"
#include "core/ops/dropout/kernels.h"

namespace tandem::kernels {
namespace {
template <typename T>
__global__ void dropout_kernel(const T* src, T* dst, long long n, fn::Dropout f0, const uint64_t* slot) {
  const fn::Dropout f = fn::with_slot(f0, slot);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dst[i] = cuda::from_float<T>(f(cuda::to_float(src[i]), static_cast<uint64_t>(i)));
}
}  // namespace

void dropout_apply_cuda(const Tensor& src, Tensor& dst, float p, uint64_t seed, uint64_t offset,
                        const uint64_t* slot) {
  long long n = src.numel();
  if (n == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(src.dtype(), T, [&] {
    dropout_kernel<T><<<cuda::grid_for(n), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(src.data_ptr()), static_cast<T*>(dst.data_ptr()), n, fn::Dropout{p, seed, offset}, slot);
    CUDA_CHECK_LAUNCH("dropout");
  });
}

}  // namespace tandem::kernels
