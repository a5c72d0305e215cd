// optim/kernels/low_copy.h: the 16-bit working copy an update kernel writes beside the f32 master
// (ParamSegment::low, optim/optimizer.h "Mixed precision"), on the CPU and as the CUDA launches'
// argument (internal to optim/).
//
// Rounding: to nearest even from the f32 value just stored in the master - the same conversion as
// core's cast op (core/ops/copy/cpu.cpp: D(float); cuda: __float2bfloat16_rn / __float2half_rn), so
// the copy equals a cast of the updated master bit for bit (tests/test_amp.cpp checks it).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tandem::optim::kernels {

// What a launch's copies are: every segment of one launch has the same kind (the optimizers group
// by it), so the kernels branch on an argument, uniformly.
enum class LowKind : int32_t { None = 0, F16 = 1, BF16 = 2 };

inline LowKind low_kind(const Tensor& low) {
  if (!low.defined()) return LowKind::None;
  return low.dtype() == DType::F16 ? LowKind::F16 : LowKind::BF16;  // optimizer.cpp admits only these
}

// The CPU loops' writer: put(i, v) stores v rounded into element i; a no-op without a copy.
struct LowWriter {
  void* ptr = nullptr;
  LowKind kind = LowKind::None;
  explicit LowWriter(const Tensor& low) : ptr(low.defined() ? low.data_ptr() : nullptr), kind(low_kind(low)) {}
  template <typename T>
  void put(int64_t i, T v) const {
    if (kind == LowKind::BF16) static_cast<BFloat16*>(ptr)[i] = BFloat16(static_cast<float>(v));
    else if (kind == LowKind::F16) static_cast<Half*>(ptr)[i] = Half(static_cast<float>(v));
  }
};

}  // namespace tandem::optim::kernels
