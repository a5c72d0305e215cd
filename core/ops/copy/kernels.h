// core/ops/copy/kernels.h: backend entry points for casts and fills (internal).
#pragma once
#include "core/tensor.h"

namespace tandem::kernels {
void cast_cpu(const Tensor& x, Tensor& y);
void fill_cpu(Tensor& t, double value);
#ifdef TANDEM_WITH_CUDA
void cast_cuda(const Tensor& x, Tensor& y);
void fill_cuda(Tensor& t, double value);
#endif
}  // namespace tandem::kernels
