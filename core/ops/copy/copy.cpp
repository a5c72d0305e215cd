// core/ops/copy/copy.cpp: dispatch and autograd for casts, transfers and fills.
#include "core/ops/copy/copy.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/copy/kernels.h"
#include "core/ops/copy/launch_count.h"

namespace tandem::ops {

Tensor cast_raw(const Tensor& x, DType to) {
  if (x.dtype() == to) return x.clone();
  Tensor y = Tensor::empty(x.shape(), to, x.device());
  if (x.numel() > 0) cast_launches().add(x.dtype(), to);  // cast_cuda launches nothing for 0 elements
  TANDEM_BACKEND(x, kernels::cast_cpu(x, y), kernels::cast_cuda(x, y));
  return y;
}

Tensor cast(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  TANDEM_CHECK(!x.requires_grad() || is_floating(to), "cast of a tensor that requires grad to ", dtype_name(to),
               " would cut the graph; detach() it first");
  Tensor y = cast_raw(x, to);
  autograd::record("CastBackward", {x}, y,
                   [from = x.dtype()](std::vector<Tensor>& g) { return std::vector<Tensor>{cast_raw(g[0], from)}; });
  return y;
}

Tensor to_device(const Tensor& x, Device d) {
  if (x.device() == d) return x;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), d);
  y.copy_(x);
  autograd::record("ToDeviceBackward", {x}, y, [from = x.device()](std::vector<Tensor>& g) {
    Tensor back = Tensor::empty(g[0].shape(), g[0].dtype(), from);
    back.copy_(g[0]);
    return std::vector<Tensor>{back};
  });
  return y;
}

void fill_(Tensor& t, double value) {
  TANDEM_BACKEND(t, kernels::fill_cpu(t, value), kernels::fill_cuda(t, value));
}

}  // namespace tandem::ops
