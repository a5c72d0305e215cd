// core/ops/common/dispatch.h: helpers for op implementations (internal).
//
// TANDEM_CPU_FLOAT_TYPES(dtype, T, body) runs body with T = float or double. CPU kernels compute in
// f32/f64 only; a 16-bit CPU tensor must be cast first, and the error says so.
// TANDEM_BACKEND(t, cpu_call, cuda_call) picks the backend by t's device; in a CPU-only build the
// CUDA branch is compiled out (no CUDA tensor can exist there). With TANDEM_SYNC_CHECK=1 the CUDA
// branch synchronises and checks for a fault after the call (core/check.h).
// with_index_ptr(idx, f) calls f with a typed pointer to an i32/i64 index tensor (embedding indices,
// class labels) on either backend.
// with_element_type<F16, BF16, kHasF64>(dtype, f) calls f(T{}) with the element type of any dtype,
// the backend naming its 16-bit types (the casts and fills of core/ops/copy on both backends).
#pragma once
#include <cstdint>

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

// f(T{}) with T the element type of `t`: F16 and BF16 are the backend's 16-bit types (Half and
// BFloat16 on the CPU, __half and __nv_bfloat16 on CUDA). kHasF64 false: f64 is refused (CUDA has
// no f64 kernels; f64 exists for the CPU gradient checks).
template <typename F16, typename BF16, bool kHasF64, typename F>
void with_element_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(F16{});
    case DType::BF16: return f(BF16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::F64:
      if constexpr (kHasF64) return f(double{});
      TANDEM_THROW("f64 is not supported on CUDA (it exists for CPU gradient checks)");
  }
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
