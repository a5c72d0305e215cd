// core/ops/batchnorm/cpu.cpp: CPU batch norm on [M, C] (channels fastest), the reference.
//
// Statistics use two passes (mean, then squared deviations) accumulated in double, so the CPU
// result is accurate even for large M or inputs with a large mean. Row loops keep the channel loop
// innermost, which reads memory contiguously and vectorises.
#include <cmath>
#include <vector>

#include "core/ops/common/dispatch.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/batchnorm/kernels.h"

namespace tandem::kernels {
namespace {

// On the CPU the parameter dtype equals the input dtype (f32 or f64), so one T serves both.
template <typename T>
const T* opt(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <typename T>
T* opt_mut(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

}  // namespace

void batchnorm_forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                           Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                           Tensor& save_mean, Tensor& save_invstd) {
  TANDEM_CPU_WIDEN_16BIT(batchnorm_forward_cpu, x, weight, bias, running_mean, running_var, training, momentum, eps, y, save_mean, save_invstd);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const int64_t M = x.size(0), C = x.size(1);
    const T* px = x.data<T>();
    const T* w = opt<T>(weight);
    const T* b = opt<T>(bias);
    T* rm = opt_mut<T>(running_mean);
    T* rv = opt_mut<T>(running_var);
    T* mean = save_mean.data<T>();
    T* invstd = save_invstd.data<T>();
    if (training) {
      std::vector<double> sum(static_cast<size_t>(C), 0.0), sq(static_cast<size_t>(C), 0.0);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < C; ++c) sum[c] += px[r * C + c];
      for (int64_t c = 0; c < C; ++c) sum[c] /= static_cast<double>(M);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < C; ++c) {
          double d = px[r * C + c] - sum[c];
          sq[c] += d * d;
        }
      for (int64_t c = 0; c < C; ++c) {
        double var = sq[c] / static_cast<double>(M);  // biased: what normalises this batch
        mean[c] = static_cast<T>(sum[c]);
        invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
        if (rm) {
          // Unbiased variance in the running estimate, as PyTorch does.
          double unbiased = var * static_cast<double>(M) / static_cast<double>(M - 1);
          rm[c] = static_cast<T>((1.0 - momentum) * rm[c] + momentum * sum[c]);
          rv[c] = static_cast<T>((1.0 - momentum) * rv[c] + momentum * unbiased);
        }
      }
    } else {
      for (int64_t c = 0; c < C; ++c) {
        mean[c] = rm[c];
        invstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
      }
    }
    // y = x * scale + shift with per-channel scale = w * invstd and shift = b - mean * scale.
    std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      scale[c] = (w ? w[c] : T(1)) * invstd[c];
      shift[c] = (b ? b[c] : T(0)) - mean[c] * scale[c];
    }
    T* py = y.data<T>();
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < C; ++c) py[r * C + c] = px[r * C + c] * scale[c] + shift[c];
  });
}

void batchnorm_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                            const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  TANDEM_CPU_WIDEN_16BIT(batchnorm_backward_cpu, dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    const int64_t M = x.size(0), C = x.size(1);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* w = opt<T>(weight);
    const T* mean = save_mean.data<T>();
    const T* invstd = save_invstd.data<T>();
    std::vector<double> sum_dy(static_cast<size_t>(C), 0.0), sum_dy_xhat(static_cast<size_t>(C), 0.0);
    const bool need_sums = training || dweight.defined() || dbias.defined();
    if (need_sums)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < C; ++c) {
          double g = pdy[r * C + c];
          sum_dy[c] += g;
          sum_dy_xhat[c] += g * (static_cast<double>(px[r * C + c]) - mean[c]) * invstd[c];
        }
    if (dweight.defined())
      for (int64_t c = 0; c < C; ++c) dweight.data<T>()[c] = static_cast<T>(sum_dy_xhat[c]);
    if (dbias.defined())
      for (int64_t c = 0; c < C; ++c) dbias.data<T>()[c] = static_cast<T>(sum_dy[c]);
    if (!dx.defined()) return;
    T* pdx = dx.data<T>();
    if (!training) {
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < C; ++c) pdx[r * C + c] = pdy[r * C + c] * (w ? w[c] : T(1)) * invstd[c];
      return;
    }
    std::vector<T> k(static_cast<size_t>(C)), mdy(static_cast<size_t>(C)), mdyx(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      k[c] = (w ? w[c] : T(1)) * invstd[c];
      mdy[c] = static_cast<T>(sum_dy[c] / static_cast<double>(M));
      mdyx[c] = static_cast<T>(sum_dy_xhat[c] / static_cast<double>(M));
    }
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < C; ++c) {
        T xhat = (px[r * C + c] - mean[c]) * invstd[c];
        pdx[r * C + c] = k[c] * (pdy[r * C + c] - mdy[c] - xhat * mdyx[c]);
      }
  });
}

}  // namespace tandem::kernels
