// core/ops/graph_scalars/increment.cpp: dispatch for increment_ (see increment.h).
#include "core/ops/graph_scalars/increment.h"

#include "core/ops/common/dispatch.h"
#include "core/ops/graph_scalars/kernels.h"

namespace tandem::ops {

void increment_(Tensor& t) {
  TANDEM_CHECK(t.dtype() == DType::I64, "increment_ counts in i64 tensors, got ", t.str());
  TANDEM_BACKEND(t, { for (int64_t i = 0; i < t.numel(); ++i) ++t.data<int64_t>()[i]; },
                 kernels::increment_i64_cuda(t));
}

}  // namespace tandem::ops
