// core/ops/pool/pool.cpp: parameter checks, output sizes, backend dispatch and autograd for pooling.
//
// Output sizes follow PyTorch's pooling_output_shape (dilation 1):
//   out = floor_or_ceil((in + 2p - k) / s) + 1, and with ceil_mode the last window must start
//   inside the input or the left padding ((out - 1) * s < in + p), else it is dropped.
// Padding may be at most half the kernel (as in PyTorch), so every window holds an input cell.
#include "core/ops/pool/pool.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/pool/kernels.h"
#include "core/ops/shape/shape.h"

namespace tandem::ops {
namespace {

int64_t pooled_size(int64_t in, int k, int s, int p, bool ceil_mode) {
  int64_t num = in + 2 * p - k + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

void check_nhwc(const Tensor& x, const char* op) {
  TANDEM_CHECK(x.dim() == 4, op, " expects an NHWC tensor [N, H, W, C], got ", x.str(),
               ": reshape [N, C] features to [N, 1, 1, C] or use an NHWC layout");
  TANDEM_CHECK(is_floating(x.dtype()), op, " needs a floating-point tensor, got ", x.str());
}

pool::Geom fixed_geom(const Tensor& x, const Pool2dParams& p, const char* op) {
  check_nhwc(x, op);
  TANDEM_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op,
               ": kernel and stride must be positive, got kernel ", p.kernel_h, "x", p.kernel_w, " stride ",
               p.stride_h, "x", p.stride_w);
  TANDEM_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
               ": padding must be between 0 and half the kernel, got pad ", p.pad_h, "x", p.pad_w, " for kernel ",
               p.kernel_h, "x", p.kernel_w);
  pool::Geom g;
  g.N = static_cast<int>(x.size(0));
  g.H = static_cast<int>(x.size(1));
  g.W = static_cast<int>(x.size(2));
  g.C = static_cast<int>(x.size(3));
  g.kh = p.kernel_h; g.kw = p.kernel_w;
  g.sh = p.stride_h; g.sw = p.stride_w;
  g.ph = p.pad_h; g.pw = p.pad_w;
  g.count_include_pad = p.count_include_pad;
  int64_t oh = pooled_size(g.H, g.kh, g.sh, g.ph, p.ceil_mode);
  int64_t ow = pooled_size(g.W, g.kw, g.sw, g.pw, p.ceil_mode);
  TANDEM_CHECK(oh > 0 && ow > 0, op, ": input ", x.str(), " is smaller than the kernel ", p.kernel_h, "x",
               p.kernel_w, " (with padding ", p.pad_h, "x", p.pad_w, "): the output would be empty");
  g.OH = static_cast<int>(oh);
  g.OW = static_cast<int>(ow);
  return g;
}

Tensor avg_with_geom(const Tensor& x, const pool::Geom& g, const char* name) {
  Tensor y = Tensor::empty({g.N, g.OH, g.OW, g.C}, x.dtype(), x.device());
  TANDEM_BACKEND(x, kernels::avg_pool2d_forward_cpu(x, g, y), kernels::avg_pool2d_forward_cuda(x, g, y));
  autograd::record(name, {x}, y, [g, shape = x.shape()](std::vector<Tensor>& grads) {
    const Tensor& dy = grads[0];
    Tensor dx = Tensor::empty(shape, dy.dtype(), dy.device());
    TANDEM_BACKEND(dy, kernels::avg_pool2d_backward_cpu(dy, g, dx), kernels::avg_pool2d_backward_cuda(dy, g, dx));
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  pool::Geom g = fixed_geom(x, p, "max_pool2d");
  Tensor y = Tensor::empty({g.N, g.OH, g.OW, g.C}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({g.N, g.OH, g.OW, g.C}, DType::I32, x.device());
  TANDEM_BACKEND(x, kernels::max_pool2d_forward_cpu(x, g, y, argmax),
                 kernels::max_pool2d_forward_cuda(x, g, y, argmax));
  autograd::record("MaxPool2dBackward", {x}, y, [g, argmax, shape = x.shape()](std::vector<Tensor>& grads) {
    const Tensor& dy = grads[0];
    Tensor dx = Tensor::empty(shape, dy.dtype(), dy.device());
    TANDEM_BACKEND(dy, kernels::max_pool2d_backward_cpu(dy, argmax, g, dx),
                   kernels::max_pool2d_backward_cuda(dy, argmax, g, dx));
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  return avg_with_geom(x, fixed_geom(x, p, "avg_pool2d"), "AvgPool2dBackward");
}

Tensor adaptive_avg_pool2d(const Tensor& x, int out_h, int out_w) {
  check_nhwc(x, "adaptive_avg_pool2d");
  TANDEM_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size must be positive, got ", out_h, "x", out_w);
  TANDEM_CHECK(x.size(1) > 0 && x.size(2) > 0, "adaptive_avg_pool2d: input ", x.str(), " has an empty plane");
  pool::Geom g;
  g.N = static_cast<int>(x.size(0));
  g.H = static_cast<int>(x.size(1));
  g.W = static_cast<int>(x.size(2));
  g.C = static_cast<int>(x.size(3));
  g.OH = out_h;
  g.OW = out_w;
  g.adaptive = true;
  return avg_with_geom(x, g, "AdaptiveAvgPool2dBackward");
}

Tensor global_avg_pool(const Tensor& x) {
  check_nhwc(x, "global_avg_pool");
  return reshape(adaptive_avg_pool2d(x, 1, 1), {x.size(0), x.size(3)});
}

}  // namespace tandem::ops
