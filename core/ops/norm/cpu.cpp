// core/ops/norm/cpu.cpp: layer normalisation on the CPU (the reference path).
//
// Two passes per row for the statistics (mean, then the centred sum of squares: no cancellation
// from E[x^2] - E[x]^2), accumulated in double. The weight and bias gradients are column sums over
// all rows, also in double.
#include <cmath>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/norm/kernels.h"

namespace tandem::kernels {

void layer_norm_fwd_cpu(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                        Tensor& rstd) {
  TANDEM_CPU_WIDEN_16BIT(layer_norm_fwd_cpu, x, w, b, eps, y, mean, rstd);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    int64_t m = x.size(0), d = x.size(1);
    const T *px = x.data<T>(), *pw = w.data<T>(), *pb = b.data<T>();
    T *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
    for (int64_t i = 0; i < m; ++i) {
      const T* r = px + i * d;
      double mu = 0, var = 0;
      for (int64_t j = 0; j < d; ++j) mu += r[j];
      mu /= static_cast<double>(d);
      for (int64_t j = 0; j < d; ++j) var += (r[j] - mu) * (r[j] - mu);
      double rs = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
      for (int64_t j = 0; j < d; ++j) py[i * d + j] = static_cast<T>((r[j] - mu) * rs * pw[j] + pb[j]);
      pm[i] = static_cast<T>(mu);
      pr[i] = static_cast<T>(rs);
    }
  });
}

void layer_norm_bwd_cpu(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx, Tensor& dw, Tensor& db) {
  TANDEM_CPU_WIDEN_16BIT(layer_norm_bwd_cpu, dy, x, w, mean, rstd, dx, dw, db);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    int64_t m = x.size(0), d = x.size(1);
    const T *px = x.data<T>(), *pdy = dy.data<T>(), *pw = w.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
    T* pdx = dx.data<T>();
    std::vector<double> sw(static_cast<size_t>(d), 0.0), sb(static_cast<size_t>(d), 0.0), xhat(static_cast<size_t>(d));
    for (int64_t i = 0; i < m; ++i) {
      const T* r = px + i * d;
      const T* g = pdy + i * d;
      double rs = pr[i], a = 0, c = 0;  // a = sum(dy w), c = sum(dy w xhat)
      for (int64_t j = 0; j < d; ++j) {
        xhat[j] = (r[j] - static_cast<double>(pm[i])) * rs;
        double gw = static_cast<double>(g[j]) * pw[j];
        a += gw;
        c += gw * xhat[j];
        sw[j] += static_cast<double>(g[j]) * xhat[j];
        sb[j] += g[j];
      }
      a /= static_cast<double>(d);
      c /= static_cast<double>(d);
      for (int64_t j = 0; j < d; ++j)
        pdx[i * d + j] = static_cast<T>(rs * (static_cast<double>(g[j]) * pw[j] - a - xhat[j] * c));
    }
    T *pdw = dw.data<T>(), *pdb = db.data<T>();
    for (int64_t j = 0; j < d; ++j) {
      pdw[j] = static_cast<T>(sw[j]);
      pdb[j] = static_cast<T>(sb[j]);
    }
  });
}

}  // namespace tandem::kernels
