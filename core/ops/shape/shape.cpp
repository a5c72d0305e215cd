// core/ops/shape/shape.cpp: reshape, flatten, concat along channels and transpose of dims 1 and 2.
//
// reshape/flatten are free views (tensors are contiguous) recorded by autograd so the gradient is
// reshaped back. concat_channels and transpose12 copy; their gradients are the inverse copies.
#include "core/ops/shape/shape.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/shape/kernels.h"

namespace tandem::ops {

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = x.view(shape);  // checks the element count and infers -1
  autograd::record("ReshapeBackward", {x}, y, [in_shape = x.shape()](std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].view(in_shape)};
  });
  return y;
}

Tensor flatten(const Tensor& x) {
  TANDEM_CHECK(x.dim() >= 1, "flatten needs a tensor with a leading batch dimension, got ", x.str());
  return reshape(x, {x.size(0), x.size(0) == 0 ? 0 : x.numel() / x.size(0)});
}

Tensor concat_channels(const std::vector<Tensor>& xs) {
  TANDEM_CHECK(!xs.empty(), "concat_channels needs at least one tensor");
  const Tensor& first = xs[0];
  TANDEM_CHECK(first.dim() >= 1, "concat_channels: inputs need at least one dimension, got ", first.str());
  Shape lead(first.shape().begin(), first.shape().end() - 1);
  int64_t total = 0;
  std::vector<int64_t> widths;
  for (const Tensor& x : xs) {
    check_same_device(first, x, "concat_channels");
    check_same_dtype(first, x, "concat_channels");
    TANDEM_CHECK(x.dim() == first.dim() && Shape(x.shape().begin(), x.shape().end() - 1) == lead,
                 "concat_channels: all inputs must agree on every dim but the last; got ", first.str(), " and ",
                 x.str());
    widths.push_back(x.size(-1));
    total += x.size(-1);
  }
  Shape out_shape = lead;
  out_shape.push_back(total);
  Tensor y = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t rows = shape_numel(lead);
  Tensor y2 = y.view({rows, total});
  int64_t col = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor src = xs[i].detach().view({rows, widths[i]});
    TANDEM_BACKEND(y, kernels::copy_columns_cpu(src, 0, y2, col, widths[i]),
                   kernels::copy_columns_cuda(src, 0, y2, col, widths[i]));
    col += widths[i];
  }
  std::vector<Shape> shapes;
  std::vector<bool> needs;  // inputs that need no gradient get no copy
  for (const Tensor& x : xs) {
    shapes.push_back(x.shape());
    needs.push_back(x.requires_grad());
  }
  autograd::record("ConcatChannelsBackward", xs, y, [shapes, needs, widths, rows, total](std::vector<Tensor>& g) {
    Tensor g2 = g[0].view({rows, total});
    std::vector<Tensor> out;
    int64_t col = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!needs[i]) {
        out.emplace_back();
        col += widths[i];
        continue;
      }
      Tensor gi = Tensor::empty(shapes[i], g2.dtype(), g2.device());
      Tensor gi2 = gi.view({rows, widths[i]});
      TANDEM_BACKEND(g2, kernels::copy_columns_cpu(g2, col, gi2, 0, widths[i]),
                     kernels::copy_columns_cuda(g2, col, gi2, 0, widths[i]));
      out.push_back(gi);
      col += widths[i];
    }
    return out;
  });
  return y;
}

namespace {
Tensor transpose12_raw(const Tensor& x) {
  Tensor y = Tensor::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.dtype(), x.device());
  TANDEM_BACKEND(x, kernels::transpose12_cpu(x, y), kernels::transpose12_cuda(x, y));
  return y;
}
}  // namespace

Tensor transpose12(const Tensor& x) {
  TANDEM_CHECK(x.dim() == 4, "transpose12 expects a 4-D tensor [B, S, H, D], got ", x.str(),
               ": view it as 4-D first");
  Tensor y = transpose12_raw(x);
  // Swapping dims 1 and 2 is its own inverse.
  autograd::record("Transpose12Backward", {x}, y,
                   [](std::vector<Tensor>& g) { return std::vector<Tensor>{transpose12_raw(g[0])}; });
  return y;
}

}  // namespace tandem::ops
