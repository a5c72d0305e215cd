// core/ops/matmul/matmul.cpp: shape checks, backend dispatch and autograd for linear and matmul.
//
// Everything is expressed through one internal GEMM (kernels::GemmArgs) whose transpose flags let
// backward read saved operands in place, without materialising a transpose:
//   C = op(A) op(B)   =>   dA = dC op(B)^T  (or op(B) dC^T when A was transposed)
//                          dB = op(A)^T dC  (or dC^T op(A) when B was transposed)
// linear flattens x [..., in] to [M, in] (a free view: tensors are contiguous) and computes
//   y = x w^T + b,  dx = dy w,  dw = dy^T x,  db = sum over rows of dy.
// The bias add and the bias gradient are fused into the GEMM epilogue where the backend can
// (cuBLASLt BIAS / BGRADB); otherwise they run as a separate broadcast add / column sum.
#include "core/ops/matmul/matmul.h"

#include <atomic>

#include "core/autograd.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/copy/launch_count.h"
#include "core/ops/elementwise/elementwise.h"
#include "core/ops/elementwise/kernels.h"
#include "core/ops/matmul/kernels.h"

namespace tandem::ops {
namespace {

// Whether a 16-bit GEMM has every stored row a multiple of 8 elements (16 bytes) long: cuBLAS's
// condition for its full-speed tensor-core kernels (launch_count.h, misaligned_gemm_launches).
bool tensor_core_aligned(const kernels::GemmArgs& g) {
  const int64_t rows[3] = {g.trans_a ? g.m : g.k, g.trans_b ? g.k : g.n, g.n};  // A, B, C as stored
  for (int64_t r : rows)
    if (r % 8 != 0) return false;
  return true;
}

// gemm_epilogue_stats' counters: [Bias, BiasGradA] x [fused, separate], CUDA calls only.
std::atomic<int64_t> g_epilogue[2][2];

bool run_gemm(const kernels::GemmArgs& g, const Tensor& a, const Tensor& b, Tensor& c, const Tensor& aux) {
  bool fused = false;
  gemm_launches().add(a.dtype(), c.dtype());  // both backends: the CPU counts what the GPU runs
  if ((a.dtype() == DType::BF16 || a.dtype() == DType::F16) && !tensor_core_aligned(g))
    misaligned_gemm_launches().add(a.dtype(), c.dtype());
  TANDEM_BACKEND(a, fused = kernels::gemm_cpu(g, a, b, c, aux), fused = kernels::gemm_cuda(g, a, b, c, aux));
  if (a.is_cuda() && g.epilogue != kernels::GemmEpilogue::None)
    g_epilogue[g.epilogue == kernels::GemmEpilogue::Bias ? 0 : 1][fused ? 0 : 1].fetch_add(1);
  return fused;
}

// C = op(A) op(B) for 2-D operands or 3-D operands with equal batch; no autograd.
Tensor gemm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  bool batched = a.dim() == 3;
  int64_t B = batched ? a.size(0) : 1;
  kernels::GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = ta ? a.size(-1) : a.size(-2);
  g.k = ta ? a.size(-2) : a.size(-1);
  g.n = tb ? b.size(-2) : b.size(-1);
  g.batch = B;
  g.stride_a = g.m * g.k;
  g.stride_b = g.k * g.n;
  g.stride_c = g.m * g.n;
  Shape out = batched ? Shape{B, g.m, g.n} : Shape{g.m, g.n};
  Tensor c = Tensor::empty(out, a.dtype(), a.device());
  run_gemm(g, a, b, c, Tensor());
  return c;
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  TANDEM_CHECK(is_floating(a.dtype()), op, ": operands must be floating point, got ", dtype_name(a.dtype()));
  TANDEM_CHECK(!(a.is_cuda() && a.dtype() == DType::F64), op,
               ": f64 exists for CPU gradient checks only; cast to f32/bf16/f16 for CUDA");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_operands(a, b, "matmul");
  TANDEM_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0)),
               "matmul: takes [m, k] @ [k, n] or [B, m, k] @ [B, k, n], got ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), "; flatten extra leading dims or use linear for a shared weight");
  int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  TANDEM_CHECK(ka == kb, "matmul: inner dimensions differ (", ka, " vs ", kb, ") for ", shape_str(a.shape()),
               trans_a ? "^T" : "", " @ ", shape_str(b.shape()), trans_b ? "^T" : "");
  Tensor c = gemm(a, b, trans_a, trans_b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  autograd::record("MatmulBackward", {a, b}, c,
                   [a = gb ? a.detach() : Tensor(), b = ga ? b.detach() : Tensor(), ga, gb, trans_a,
                    trans_b](std::vector<Tensor>& g) {
                     const Tensor& dc = g[0];
                     Tensor da, db;
                     if (ga) da = trans_a ? gemm(b, dc, trans_b, true) : gemm(dc, b, false, !trans_b);
                     if (gb) db = trans_b ? gemm(dc, a, true, trans_a) : gemm(a, dc, !trans_a, false);
                     return std::vector<Tensor>{da, db};
                   });
  return c;
}

LinearGrads linear_grads(const Tensor& dy, const Tensor& x, const Tensor& w, bool want_dx, bool want_dw,
                         bool want_db) {
  const int64_t M = dy.size(0), out = dy.size(1);
  LinearGrads d;
  if (want_dx) d.dx = gemm(dy, w, false, false);
  if (want_db) d.db = Tensor::empty({out}, dy.dtype(), dy.device());
  bool db_done = false;
  if (want_dw) {
    const int64_t in = x.size(1);
    kernels::GemmArgs g;  // dw [out, in] = dy^T [out, M] @ x [M, in]; db = row sums of dy^T
    g.trans_a = true;
    g.m = out;
    g.n = in;
    g.k = M;
    g.epilogue = want_db ? kernels::GemmEpilogue::BiasGradA : kernels::GemmEpilogue::None;
    d.dw = Tensor::empty({out, in}, dy.dtype(), dy.device());
    db_done = run_gemm(g, dy, x, d.dw, d.db) && want_db;
  }
  if (want_db && !db_done) d.db = sum_to_trailing(dy, {out});
  return d;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operands(x, w, "linear");
  TANDEM_CHECK(w.dim() == 2, "linear: weight must be [out_features, in_features], got ", shape_str(w.shape()));
  TANDEM_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ", shape_str(x.shape()),
               " must end in in_features = ", w.size(1), " (weight ", shape_str(w.shape()), ")");
  const int64_t in = w.size(1), out = w.size(0), M = x.numel() / in;
  if (b.defined()) {
    check_operands(x, b, "linear (bias)");
    check_shape(b, {out}, "linear", "bias");
  }
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());

  kernels::GemmArgs g;  // y2 [M, out] = x2 [M, in] @ w^T
  g.m = M;
  g.n = out;
  g.k = in;
  g.trans_b = true;
  g.epilogue = b.defined() ? kernels::GemmEpilogue::Bias : kernels::GemmEpilogue::None;
  Tensor y2 = y.view({M, out});
  if (!run_gemm(g, x.view({M, in}), w, y2, b) && b.defined()) {
    Tensor y2c = y2;  // the backend had no fused bias for this shape: add it as a broadcast
    TANDEM_BACKEND(y2, kernels::binary_cpu(kernels::binary_op<fn::Add>(), y2, b, y2c, 1, 1),
                   kernels::binary_cuda(kernels::binary_op<fn::Add>(), y2, b, y2c, 1, 1));
  }

  bool gx = x.requires_grad(), gw = w.requires_grad(), gbias = b.defined() && b.requires_grad();
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  autograd::record("LinearBackward", inputs, y,
                   [x = gw ? x.detach() : Tensor(), w = gx ? w.detach() : Tensor(), gx, gw, gbias, has_b = b.defined(),
                    x_shape = x.shape(), M, in, out](std::vector<Tensor>& gr) {
                     LinearGrads d = linear_grads(gr[0].view({M, out}), gw ? x.view({M, in}) : Tensor(), w, gx, gw,
                                                  gbias);
                     std::vector<Tensor> res{gx ? d.dx.view(x_shape) : Tensor(), d.dw};
                     if (has_b) res.push_back(d.db);
                     return res;
                   });
  return y;
}

GemmEpilogueStats gemm_epilogue_stats() {
  return {g_epilogue[0][0].load(), g_epilogue[0][1].load(), g_epilogue[1][0].load(), g_epilogue[1][1].load()};
}

}  // namespace tandem::ops
