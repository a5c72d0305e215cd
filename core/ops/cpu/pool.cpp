// core/ops/cpu/pool.cpp: CPU pooling on NHWC, the reference for the CUDA kernels.
//
// Loops run over (n, oh, ow, window cell) with the channel loop innermost, so each step reads C
// contiguous values and the compiler vectorises it. Window bounds come from pool_functors.h, shared
// with CUDA. Averages accumulate in double. The backwards scatter each output gradient into the
// cells its window read (serial, hence deterministic); CUDA gathers instead (see cuda/pool.cu),
// which sums the same terms in another order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/kernels/pool.h"

namespace tandem::kernels {

void max_pool2d_forward_cpu(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax) {
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    int32_t* pa = argmax.data<int32_t>();
    const int64_t C = g.C;
    std::vector<T> best(static_cast<size_t>(C));
    for (int n = 0; n < g.N; ++n)
      for (int oh = 0; oh < g.OH; ++oh)
        for (int ow = 0; ow < g.OW; ++ow) {
          int h0, h1, w0, w1, div;
          pool::window(g, oh, ow, h0, h1, w0, w1, div);
          int64_t o = ((static_cast<int64_t>(n) * g.OH + oh) * g.OW + ow) * C;
          for (int64_t c = 0; c < C; ++c) {
            best[c] = -std::numeric_limits<T>::infinity();
            pa[o + c] = -1;
          }
          for (int h = h0; h < h1; ++h)
            for (int w = w0; w < w1; ++w) {
              const T* row = px + ((static_cast<int64_t>(n) * g.H + h) * g.W + w) * C;
              int32_t idx = h * g.W + w;
              for (int64_t c = 0; c < C; ++c) {
                // Strict '>' keeps the first maximum; a NaN wins once and then sticks (propagates).
                bool take = pa[o + c] < 0 || row[c] > best[c] || (std::isnan(row[c]) && !std::isnan(best[c]));
                if (take) {
                  best[c] = row[c];
                  pa[o + c] = idx;
                }
              }
            }
          for (int64_t c = 0; c < C; ++c) py[o + c] = best[c];
        }
  });
}

void max_pool2d_backward_cpu(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx) {
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
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t C = g.C;
    std::vector<double> acc(static_cast<size_t>(C));
    for (int n = 0; n < g.N; ++n)
      for (int oh = 0; oh < g.OH; ++oh)
        for (int ow = 0; ow < g.OW; ++ow) {
          int h0, h1, w0, w1, div;
          pool::window(g, oh, ow, h0, h1, w0, w1, div);
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int h = h0; h < h1; ++h)
            for (int w = w0; w < w1; ++w) {
              const T* row = px + ((static_cast<int64_t>(n) * g.H + h) * g.W + w) * C;
              for (int64_t c = 0; c < C; ++c) acc[c] += row[c];
            }
          T* out = py + ((static_cast<int64_t>(n) * g.OH + oh) * g.OW + ow) * C;
          for (int64_t c = 0; c < C; ++c) out[c] = static_cast<T>(acc[c] / div);
        }
  });
}

void avg_pool2d_backward_cpu(const Tensor& dy, const pool::Geom& g, Tensor& dx) {
  TANDEM_CPU_FLOAT_TYPES(dy.dtype(), T, [&] {
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    std::fill(pdx, pdx + dx.numel(), T(0));
    const int64_t C = g.C;
    for (int n = 0; n < g.N; ++n)
      for (int oh = 0; oh < g.OH; ++oh)
        for (int ow = 0; ow < g.OW; ++ow) {
          int h0, h1, w0, w1, div;
          pool::window(g, oh, ow, h0, h1, w0, w1, div);
          const T* grow = pdy + ((static_cast<int64_t>(n) * g.OH + oh) * g.OW + ow) * C;
          T inv = T(1) / static_cast<T>(div);
          for (int h = h0; h < h1; ++h)
            for (int w = w0; w < w1; ++w) {
              T* row = pdx + ((static_cast<int64_t>(n) * g.H + h) * g.W + w) * C;
              for (int64_t c = 0; c < C; ++c) row[c] += grow[c] * inv;
            }
        }
  });
}

}  // namespace tandem::kernels
