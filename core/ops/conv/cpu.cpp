// core/ops/conv/cpu.cpp: NHWC convolution as im2col + one OpenBLAS GEMM per (image chunk, group).
//
// For a chunk of images and group g, im2col writes the column matrix
//     col [rows = images * OH * OW, K = KH * KW * Cg]       (row = one output pixel, K in (kh, kw, c) order)
// whose K order equals the OHWI weight's row order, so with w_g = rows of w for group g ([Og, K]):
//     forward          y_g   [rows, Og] = col   @ w_g^T         (written with ldc = O into NHWC y)
//     backward data    dcol  [rows, K]  = dy_g  @ w_g,   then col2im scatters dcol into dx (+=)
//     backward filter  dw_g  [Og, K]   += dy_g^T @ col           (beta = 1 after the first chunk)
// In NHWC, im2col copies contiguous runs of Cg channels (memcpy), and a 1x1 / stride 1 / no-pad
// ungrouped conv needs no im2col at all: x itself is the column matrix. Chunks bound the column
// buffer (kColumnBudgetBytes) while keeping the GEMM tall enough for OpenBLAS to use all cores.
// The entry points at the bottom try oneDNN first (cpu_onednn.h: f32/bf16 when built in and
// BackendConfig::cpu_onednn is on) and run this reference where it declines; a BackendScope with
// cpu_onednn off forces the reference, which is what the tests compare oneDNN against.
// Left out: Winograd/FFT, a threaded im2col (it is a copy; the GEMM dominates), and a special
// depthwise kernel (groups == C runs one skinny GEMM per channel: correct but not fast).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/conv/cpu_onednn.h"
#include "core/ops/conv/kernels.h"

namespace tandem::kernels {
namespace {

// 64 MiB of columns: large enough that a chunk holds several 56x56 images of ResNet's 3x3 convs
// (one image is 56*56*576*4 B = 7 MiB), small enough to stay far below host memory limits.
constexpr int64_t kColumnBudgetBytes = 64ll << 20;

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
              (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                 int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
              (blasint)k, 1.0, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

struct Plan {
  int64_t groups, cg, og, k, pix;  // channels per group in/out, K, output pixels per image
  int64_t chunk;                   // images per column buffer
  bool direct;                     // x is already the column matrix
};

template <typename T>
Plan make_plan(const ConvGeom& g) {
  Plan pl;
  pl.groups = g.p.groups;
  pl.cg = g.c / pl.groups;
  pl.og = g.o / pl.groups;
  pl.k = g.kh * g.kw * pl.cg;
  pl.pix = g.oh * g.ow;
  const auto& p = g.p;
  pl.direct = g.kh == 1 && g.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
              pl.groups == 1;
  int64_t per_image = std::max<int64_t>(1, pl.pix * pl.k * static_cast<int64_t>(sizeof(T)));
  pl.chunk = std::clamp<int64_t>(kColumnBudgetBytes / per_image, 1, std::max<int64_t>(g.n, 1));
  return pl;
}

// Columns of group `grp` for images [n0, n0 + nc).
template <typename T>
void im2col(const ConvGeom& g, const Plan& pl, const T* x, int64_t n0, int64_t nc, int64_t grp, T* col) {
  const auto& p = g.p;
  const size_t run = static_cast<size_t>(pl.cg) * sizeof(T);
  for (int64_t n = n0; n < n0 + nc; ++n) {
    const T* xn = x + n * g.h * g.w * g.c + grp * pl.cg;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* row = col;
        col += pl.k;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          int64_t iy = oy * p.stride_h - p.pad_h + ky * p.dilation_h;
          if (iy < 0 || iy >= g.h) {
            std::memset(row, 0, run * g.kw);
            row += g.kw * pl.cg;
            continue;
          }
          for (int64_t kx = 0; kx < g.kw; ++kx, row += pl.cg) {
            int64_t ix = ox * p.stride_w - p.pad_w + kx * p.dilation_w;
            if (ix < 0 || ix >= g.w)
              std::memset(row, 0, run);
            else
              std::memcpy(row, xn + (iy * g.w + ix) * g.c, run);
          }
        }
      }
  }
}

// The adjoint of im2col: dx[...] += dcol[...] (overlapping windows sum).
template <typename T>
void col2im(const ConvGeom& g, const Plan& pl, const T* col, int64_t n0, int64_t nc, int64_t grp, T* dx) {
  const auto& p = g.p;
  for (int64_t n = n0; n < n0 + nc; ++n) {
    T* dxn = dx + n * g.h * g.w * g.c + grp * pl.cg;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox, col += pl.k) {
        const T* row = col;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          int64_t iy = oy * p.stride_h - p.pad_h + ky * p.dilation_h;
          if (iy < 0 || iy >= g.h) {
            row += g.kw * pl.cg;
            continue;
          }
          for (int64_t kx = 0; kx < g.kw; ++kx, row += pl.cg) {
            int64_t ix = ox * p.stride_w - p.pad_w + kx * p.dilation_w;
            if (ix < 0 || ix >= g.w) continue;
            T* dst = dxn + (iy * g.w + ix) * g.c;
            for (int64_t c = 0; c < pl.cg; ++c) dst[c] += row[c];
          }
        }
      }
  }
}

// The loop that forward and backward filter share: for each (image chunk, group), in that order,
// calls gemm_step(n0, rows, grp, cm) with cm the chunk's column matrix for the group ([rows, K]:
// x itself on the direct path, else im2col's output).
template <typename T, typename F>
void for_each_column_block(const ConvGeom& g, const Plan& pl, const T* x, F&& gemm_step) {
  std::vector<T> col(pl.direct ? 0 : pl.chunk * pl.pix * pl.k);
  for (int64_t n0 = 0; n0 < g.n; n0 += pl.chunk) {
    int64_t nc = std::min(pl.chunk, g.n - n0), rows = nc * pl.pix;
    for (int64_t grp = 0; grp < pl.groups; ++grp) {
      const T* cm = pl.direct ? x + n0 * pl.pix * g.c : col.data();
      if (!pl.direct) im2col(g, pl, x, n0, nc, grp, col.data());
      gemm_step(n0, rows, grp, cm);
    }
  }
}

template <typename T>
void forward(const ConvGeom& g, const T* x, const T* w, T* y) {
  Plan pl = make_plan<T>(g);
  for_each_column_block(g, pl, x, [&](int64_t n0, int64_t rows, int64_t grp, const T* cm) {
    gemm(false, true, rows, pl.og, pl.k, cm, pl.k, w + grp * pl.og * pl.k, pl.k, T(0),
         y + n0 * pl.pix * g.o + grp * pl.og, g.o);
  });
}

template <typename T>
void backward_data(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  Plan pl = make_plan<T>(g);
  if (pl.direct) {  // dx [N*H*W, C] = dy [N*H*W, O] @ w [O, C]
    gemm(false, false, g.n * pl.pix, g.c, g.o, dy, g.o, w, g.c, T(0), dx, g.c);
    return;
  }
  std::fill(dx, dx + g.n * g.h * g.w * g.c, T(0));
  std::vector<T> col(pl.chunk * pl.pix * pl.k);
  for (int64_t n0 = 0; n0 < g.n; n0 += pl.chunk) {
    int64_t nc = std::min(pl.chunk, g.n - n0), rows = nc * pl.pix;
    for (int64_t grp = 0; grp < pl.groups; ++grp) {
      gemm(false, false, rows, pl.k, pl.og, dy + n0 * pl.pix * g.o + grp * pl.og, g.o, w + grp * pl.og * pl.k, pl.k,
           T(0), col.data(), pl.k);
      col2im(g, pl, col.data(), n0, nc, grp, dx);
    }
  }
}

template <typename T>
void backward_filter(const ConvGeom& g, const T* x, const T* dy, T* dw) {
  Plan pl = make_plan<T>(g);
  if (g.n == 0) std::fill(dw, dw + g.o * pl.k, T(0));
  for_each_column_block(g, pl, x, [&](int64_t n0, int64_t rows, int64_t grp, const T* cm) {
    gemm(true, false, pl.og, pl.k, rows, dy + n0 * pl.pix * g.o + grp * pl.og, g.o, cm, pl.k,
         n0 == 0 ? T(0) : T(1), dw + grp * pl.og * pl.k, pl.k);
  });
}

}  // namespace

void conv2d_forward_cpu(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y) {
  if (conv2d_forward_onednn(g, x, w, y)) return;
  TANDEM_CPU_WIDEN_16BIT(conv2d_forward_cpu, g, x, w, y);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] { forward<T>(g, x.data<T>(), w.data<T>(), y.data<T>()); });
}

void conv2d_backward_data_cpu(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (conv2d_backward_data_onednn(g, dy, w, dx)) return;
  TANDEM_CPU_WIDEN_16BIT(conv2d_backward_data_cpu, g, dy, w, dx);
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] { backward_data<T>(g, dy.data<T>(), w.data<T>(), dx.data<T>()); });
}

void conv2d_backward_filter_cpu(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw) {
  if (onednn_preferred_for_backward_filter(g) && conv2d_backward_filter_onednn(g, x, dy, dw)) return;
  TANDEM_CPU_WIDEN_16BIT(conv2d_backward_filter_cpu, g, x, dy, dw);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] { backward_filter<T>(g, x.data<T>(), dy.data<T>(), dw.data<T>()); });
}

}  // namespace tandem::kernels
