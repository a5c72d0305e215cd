// core/ops/pool/cpu.cpp: CPU pooling on NHWC, the reference for the CUDA kernels.
//
// Loops run over (n, oh, ow, window cell) with the channel loop innermost, so each step reads C
// contiguous values and the compiler vectorises it. Window bounds come from functors.h, shared
// with CUDA. Averages accumulate in double. The backwards scatter each output gradient into the
// cells its window read (serial, hence deterministic); CUDA gathers instead (see cuda.cu),
// which sums the same terms in another order.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/pool/kernels.h"

namespace tandem::kernels {
namespace {

// One output cell (n, oh, ow): `out` is its offset in y / dy, [h0, h1) x [w0, w1) the input cells
// its window reads, `div` the average's divisor.
struct Window {
  int n;
  int64_t out;
  int h0, h1, w0, w1, div;
};

// Calls f(Window) for every output cell in (n, oh, ow) order: the loop that the max forward and
// both average passes share.
template <typename F>
void for_each_window(const pool::Geom& g, F&& f) {
  for (int n = 0; n < g.N; ++n)
    for (int oh = 0; oh < g.OH; ++oh)
      for (int ow = 0; ow < g.OW; ++ow) {
        Window win;
        win.n = n;
        win.out = ((static_cast<int64_t>(n) * g.OH + oh) * g.OW + ow) * g.C;
        pool::window(g, oh, ow, win.h0, win.h1, win.w0, win.w1, win.div);
        f(win);
      }
}

// Offset of input cell (n, h, w)'s C channels.
int64_t in_offset(const pool::Geom& g, int n, int h, int w) {
  return ((static_cast<int64_t>(n) * g.H + h) * g.W + w) * g.C;
}

}  // namespace

void max_pool2d_forward_cpu(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax) {
  TANDEM_CPU_WIDEN_16BIT(max_pool2d_forward_cpu, x, g, y, argmax);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    int32_t* pa = argmax.data<int32_t>();
    const int64_t C = g.C;
    for_each_window(g, [&](const Window& win) {
      // The running maximum lives in y and its index in argmax (no scratch row), and the channel
      // loop is branch-free (selects), so it vectorises: ResNet-18's stem pool at 64 px, batch 32,
      // went from 16-28 ms to 1.5-8.5 ms (bench_ops, 1 thread, a loaded machine). The first cell of a
      // window is taken as it is (max_takes' `empty`), the others by max_takes' rule: greater, or NaN.
      T* __restrict best = py + win.out;
      int32_t* __restrict arg = pa + win.out;
      if (win.h0 >= win.h1 || win.w0 >= win.w1) {  // an empty window: -inf, no index
        std::fill(best, best + C, -std::numeric_limits<T>::infinity());
        std::fill(arg, arg + C, -1);
        return;
      }
      const T* __restrict first = px + in_offset(g, win.n, win.h0, win.w0);
      const int32_t first_idx = win.h0 * g.W + win.w0;
      for (int64_t c = 0; c < C; ++c) {
        best[c] = first[c];
        arg[c] = first_idx;
      }
      for (int h = win.h0; h < win.h1; ++h)
        for (int w = win.w0; w < win.w1; ++w) {
          if (h == win.h0 && w == win.w0) continue;
          const T* __restrict row = px + in_offset(g, win.n, h, w);
          const int32_t idx = h * g.W + w;
          for (int64_t c = 0; c < C; ++c) {
            const T v = row[c];
            const bool take = pool::max_takes(v, best[c], false);
            best[c] = take ? v : best[c];
            arg[c] = take ? idx : arg[c];
          }
        }
    });
  });
}

void max_pool2d_backward_cpu(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx) {
  TANDEM_CPU_WIDEN_16BIT(max_pool2d_backward_cpu, dy, argmax, g, dx);
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] {
    const T* pdy = dy.data<T>();
    const int32_t* pa = argmax.data<int32_t>();
    T* pdx = dx.data<T>();
    std::fill(pdx, pdx + dx.numel(), T(0));
    const int64_t C = g.C, plane = static_cast<int64_t>(g.H) * g.W;
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < static_cast<int64_t>(g.OH) * g.OW; ++o)
        for (int64_t c = 0; c < C; ++c) {
          int64_t k = (n * g.OH * g.OW + o) * C + c;
          pdx[(n * plane + pa[k]) * C + c] += pdy[k];
        }
  });
}

void avg_pool2d_forward_cpu(const Tensor& x, const pool::Geom& g, Tensor& y) {
  TANDEM_CPU_WIDEN_16BIT(avg_pool2d_forward_cpu, x, g, y);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t C = g.C;
    std::vector<double> acc(static_cast<size_t>(C));
    for_each_window(g, [&](const Window& win) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int h = win.h0; h < win.h1; ++h)
        for (int w = win.w0; w < win.w1; ++w) {
          const T* row = px + in_offset(g, win.n, h, w);
          for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
        }
      T* out = py + win.out;
      for (int64_t c = 0; c < C; ++c) out[c] = static_cast<T>(acc[c] / win.div);
    });
  });
}

void avg_pool2d_backward_cpu(const Tensor& dy, const pool::Geom& g, Tensor& dx) {
  TANDEM_CPU_WIDEN_16BIT(avg_pool2d_backward_cpu, dy, g, dx);
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] {
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    std::fill(pdx, pdx + dx.numel(), T(0));
    const int64_t C = g.C;
    for_each_window(g, [&](const Window& win) {
      const T* grow = pdy + win.out;
      T inv = T(1) / static_cast<T>(win.div);
      for (int h = win.h0; h < win.h1; ++h)
        for (int w = win.w0; w < win.w1; ++w) {
          T* row = pdx + in_offset(g, win.n, h, w);
          for (int64_t c = 0; c < C; ++c) row[c] += grow[c] * inv;
        }
    });
  });
}

}  // namespace tandem::kernels
