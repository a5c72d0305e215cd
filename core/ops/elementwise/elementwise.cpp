// core/ops/elementwise/elementwise.cpp: shape checks, backend dispatch and autograd for elementwise ops.
// Each op names its functor (fn::Relu, fn::Axpby, ...): run_unary<F> / run_binary<F> turn it into
// the op code that the backends share (see core/ops/elementwise/functors.h for the op table).
#include "core/ops/elementwise/elementwise.h"

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/elementwise/kernels.h"

namespace tandem::ops {

namespace {

bool trailing_broadcast(const Tensor& a, const Tensor& b) {
  if (b.dim() > a.dim()) return false;
  for (int64_t i = 1; i <= b.dim(); ++i)
    if (a.shape()[a.dim() - i] != b.shape()[b.dim() - i]) return false;
  return true;
}

void check_binary(const Tensor& a, const Tensor& b, const char* op, bool allow_broadcast) {
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  if (a.shape() == b.shape()) return;
  TANDEM_CHECK(allow_broadcast && trailing_broadcast(a, b), op, ": shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " do not match", allow_broadcast ? " (b may only broadcast along leading dims of a)" : "");
}

// y = F(x) into an existing y (which may be x), F a functor of fn::UnaryOps whose parameter (if
// any) is alpha.
template <typename F>
void unary_into(const Tensor& x, Tensor& y, float alpha) {
  constexpr kernels::Unary op = kernels::unary_op<F>();
  TANDEM_BACKEND(x, kernels::unary_cpu(op, x, y, alpha), kernels::unary_cuda(op, x, y, alpha));
}

// y = F(a, b) into an existing y (which may be a), F a functor of fn::BinaryOps whose parameters
// (if any) are alpha, beta.
template <typename F>
void binary_into(const Tensor& a, const Tensor& b, Tensor& y, float alpha, float beta) {
  constexpr kernels::Binary op = kernels::binary_op<F>();
  TANDEM_BACKEND(a, kernels::binary_cpu(op, a, b, y, alpha, beta), kernels::binary_cuda(op, a, b, y, alpha, beta));
}

template <typename F>
Tensor run_unary(const Tensor& x, float alpha = 0) {
  Tensor y = Tensor::empty_like(x);
  unary_into<F>(x, y, alpha);
  return y;
}

template <typename F>
Tensor run_binary(const Tensor& a, const Tensor& b, float alpha = 1, float beta = 1) {
  Tensor y = Tensor::empty_like(a);
  binary_into<F>(a, b, y, alpha, beta);
  return y;
}

}  // namespace

Tensor sum_to_trailing(const Tensor& g, const Shape& trailing) {
  int64_t n = shape_numel(trailing);
  TANDEM_CHECK(n > 0 && g.numel() % n == 0, "sum_to_trailing: ", g.str(), " does not end in ", shape_str(trailing));
  Tensor out = Tensor::empty(trailing, g.dtype(), g.device());
  Tensor g2 = g.detach().view({g.numel() / n, n});
  TANDEM_BACKEND(g, kernels::sum_leading_cpu(g2, out), kernels::sum_leading_cuda(g2, out));
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "add", true);
  Tensor y = run_binary<fn::Add>(a, b);
  autograd::record("AddBackward", {a, b}, y, [sa = a.shape(), sb = b.shape()](std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0], sa == sb ? g[0] : sum_to_trailing(g[0], sb)};
  });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "sub", true);
  Tensor y = run_binary<fn::Sub>(a, b);
  autograd::record("SubBackward", {a, b}, y, [sa = a.shape(), sb = b.shape()](std::vector<Tensor>& g) {
    Tensor gb = scale(g[0], -1.0f);
    return std::vector<Tensor>{g[0], sa == sb ? gb : sum_to_trailing(gb, sb)};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "mul", true);
  Tensor y = run_binary<fn::Mul>(a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  // Each side keeps only the other operand it needs, plus b's shape (db sums over b's broadcast).
  autograd::record("MulBackward", {a, b}, y,
                   [a = gb ? a.detach() : Tensor(), b = ga ? b.detach() : Tensor(), b_shape = b.shape(), ga,
                    gb](std::vector<Tensor>& g) {
                     Tensor da, db;
                     if (ga) da = run_binary<fn::Mul>(g[0], b);
                     if (gb) {
                       db = run_binary<fn::Mul>(g[0], a);
                       if (db.shape() != b_shape) db = sum_to_trailing(db, b_shape);
                     }
                     return std::vector<Tensor>{da, db};
                   });
  return y;
}

Tensor scale(const Tensor& x, float alpha) {
  Tensor y = run_unary<fn::Scale>(x, alpha);
  autograd::record("ScaleBackward", {x}, y,
                   [alpha](std::vector<Tensor>& g) { return std::vector<Tensor>{run_unary<fn::Scale>(g[0], alpha)}; });
  return y;
}

Tensor add_scalar(const Tensor& x, float alpha) {
  Tensor y = run_unary<fn::AddScalar>(x, alpha);
  autograd::record("AddScalarBackward", {x}, y, [](std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return y;
}

Tensor axpby(const Tensor& a, const Tensor& b, float alpha, float beta) {
  check_binary(a, b, "axpby", false);
  Tensor y = run_binary<fn::Axpby>(a, b, alpha, beta);
  autograd::record("AxpbyBackward", {a, b}, y, [alpha, beta](std::vector<Tensor>& g) {
    return std::vector<Tensor>{run_unary<fn::Scale>(g[0], alpha), run_unary<fn::Scale>(g[0], beta)};
  });
  return y;
}

Tensor relu(const Tensor& x) {
  Tensor y = run_unary<fn::Relu>(x);
  // Saving the output instead of the input is equivalent for ReLU (y > 0 iff x > 0, y is NaN iff x
  // is) and lets the input be freed; a detached alias avoids the output->node->output cycle.
  autograd::record("ReluBackward", {x}, y, [y = y.detach()](std::vector<Tensor>& g) {
    return std::vector<Tensor>{run_binary<fn::ReluBackward>(g[0], y)};
  });
  return y;
}

void relu_(Tensor& x) {
  const bool record = autograd::any_requires_grad({&x});
  TANDEM_CHECK(!(record && x.is_leaf()), "relu_: ", x.str(),
               " is a leaf that requires grad, and overwriting it would lose its value; use ops::relu");
  unary_into<fn::Relu>(x, x, 0);
  if (!record) return;
  Tensor y = x.detach();  // a new handle on the same storage: it takes the node, x's history stays behind
  autograd::record("ReluBackward", {x}, y, [out = y.detach()](std::vector<Tensor>& g) {
    return std::vector<Tensor>{run_binary<fn::ReluBackward>(g[0], out)};
  });
  x = y;
}

Tensor gelu(const Tensor& x) {
  Tensor y = run_unary<fn::Gelu>(x);
  autograd::record("GeluBackward", {x}, y, [x = x.detach()](std::vector<Tensor>& g) {
    return std::vector<Tensor>{run_binary<fn::GeluBackward>(g[0], x)};
  });
  return y;
}

Tensor square(const Tensor& x) {
  Tensor y = run_unary<fn::Square>(x);
  autograd::record("SquareBackward", {x}, y, [x = x.detach()](std::vector<Tensor>& g) {
    // 2 (g x) as a scale, not axpby(g x, x, 2, 0): 0 * x would turn x = +-inf into NaN.
    return std::vector<Tensor>{run_unary<fn::Scale>(run_binary<fn::Mul>(g[0], x), 2.0f)};
  });
  return y;
}

Tensor pow(const Tensor& x, float exponent) {
  Tensor y = run_unary<fn::Pow>(x, exponent);
  autograd::record("PowBackward", {x}, y, [x = x.detach(), exponent](std::vector<Tensor>& g) {
    return std::vector<Tensor>{run_binary<fn::PowBackward>(g[0], x, exponent)};
  });
  return y;
}

void add_(Tensor& a, const Tensor& b) {
  check_binary(a, b, "add_", true);
  binary_into<fn::Add>(a, b, a, 1, 1);
}

void scale_(Tensor& a, float alpha) {
  unary_into<fn::Scale>(a, a, alpha);
}

void axpby_(Tensor& a, const Tensor& b, float alpha, float beta) {
  check_binary(a, b, "axpby_", false);
  binary_into<fn::Axpby>(a, b, a, alpha, beta);
}

}  // namespace tandem::ops
