// core/ops/common/dispatch.h: helpers for op implementations (internal).
//
// TANDEM_CPU_FLOAT_TYPES(dtype, T, body) runs body with T = float or double. CPU kernels compute in
// f32/f64 only; a 16-bit CPU tensor must be cast first, and the error says so.
// TANDEM_BACKEND(t, cpu_call, cuda_call) picks the backend by t's device; in a CPU-only build the
// CUDA branch is compiled out (no CUDA tensor can exist there). With TANDEM_SYNC_CHECK=1 the CUDA
// branch synchronises and checks for a fault after the call (core/check.h).
// with_index_ptr(idx, f) calls f with a typed pointer to an i32/i64 index tensor (embedding indices,
// class labels) on either backend.
#pragma once
#include "core/check.h"
#include "core/tensor.h"

#define TANDEM_CPU_FLOAT_TYPES(dtype, T, ...)                                                            \
  [&] {                                                                                                  \
    switch (dtype) {                                                                                     \
      case ::tandem::DType::F32: { using T = float; return __VA_ARGS__(); }                              \
      case ::tandem::DType::F64: { using T = double; return __VA_ARGS__(); }                             \
      default:                                                                                           \
        TANDEM_THROW("CPU kernels compute in f32 or f64, got ", ::tandem::dtype_name(dtype),              \
                     ": cast the tensor with .to(DType::F32) first");                                    \
    }                                                                                                    \
  }()

namespace tandem::kernels {
// f(const int64_t*) for i64 indices, f(const int32_t*) otherwise: the op layer has already checked
// that the dtype is one of the two (and the range), so the kernels only read.
template <typename F>
void with_index_ptr(const Tensor& idx, F&& f) {
  if (idx.dtype() == DType::I64)
    f(static_cast<const int64_t*>(idx.data_ptr()));
  else
    f(static_cast<const int32_t*>(idx.data_ptr()));
}
}  // namespace tandem::kernels

#ifdef TANDEM_WITH_CUDA
#define TANDEM_BACKEND(t, cpu_call, cuda_call)                                           \
  do {                                                                                   \
    if ((t).is_cuda()) {                                                                 \
      cuda_call;                                                                         \
      if (::tandem::sync_check_enabled()) ::tandem::sync_check_after(__FILE__, __LINE__); \
    } else {                                                                             \
      cpu_call;                                                                          \
    }                                                                                    \
  } while (0)
#else
#define TANDEM_BACKEND(t, cpu_call, cuda_call) \
  do {                                         \
    cpu_call;                                  \
  } while (0)
#endif
