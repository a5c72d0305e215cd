// core/ops/batchnorm/cpu.cpp: CPU batch norm on [M, C] (channels fastest), the reference, and the
// fused ReLU / add + ReLU tails of ops::batch_norm_relu and ops::batch_norm_add_relu (training).
//
// Statistics use two passes (mean, then squared deviations) accumulated in double, so the CPU
// result is accurate even for large M or inputs with a large mean. Row loops keep the channel loop
// innermost, which reads memory contiguously and vectorises.
// The plain op and the fused tails share every loop: the tail is a template argument that adds the
// composition's own operations in its order (forward t = x * scale + shift, t = t + z, y = t <= 0 ?
// 0 : t; backward g = y <= 0 ? 0 : dy, the dz of the add being g), so the fused ops give the bytes of
// relu(batch_norm(x) [+ z]) and its gradients (tests/test_bn_relu_cpu.cpp).
// Threads: with OpenMP (the pool oneDNN uses, sized by core/threads.cpp) a pass over enough values
// is split between the pool's threads without changing a bit (common/cpu/parallel.h): the
// statistics and gradient sums by blocks of channels (each channel's sum still runs over its rows
// in order, on one thread), the elementwise passes by blocks of rows (each value is computed
// alone). Built without OpenMP (the TSan tree, core/CMakeLists.txt), every pass runs serially.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/ops/common/cpu/parallel.h"
#include "core/ops/common/cpu/widen.h"
#include "core/ops/common/dispatch.h"
#include "core/ops/batchnorm/kernels.h"

namespace tandem::kernels {
namespace {

using Tail = ops::BatchNormTail;

// On the CPU the parameter dtype equals the input dtype (f32 or f64), so one T serves both.
template <typename T>
const T* opt(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <typename T>
T* opt_mut(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

using cpu_parallel::for_blocks;
using cpu_parallel::threads_for;

// Channel blocks are whole multiples of 16 channels (64 bytes of f32, a cache line): two threads
// then share no line of the per-channel sums, and their row segments of x, dy and dz stay whole lines.
constexpr int64_t kChannelGrain = 16;

// Two per-channel sums of one block of channels [c0, c1), in arrays of the block's own. Accumulating
// straight into the shared per-channel vectors made the two threads write the cache line where
// their blocks meet once per row (the vectors are not line-aligned): the sums passes ran slower on 2
// threads than on 1 (perf, ResNet-18). Each channel's sum is the same sequence of additions.
struct BlockSums {
  int64_t c0, n;
  std::vector<double> a, b;
  BlockSums(int64_t begin, int64_t end)
      : c0(begin), n(end - begin), a(static_cast<size_t>(n), 0.0), b(static_cast<size_t>(n), 0.0) {}
  void copy_to(std::vector<double>& a_out, std::vector<double>& b_out) const {
    std::copy(a.begin(), a.end(), a_out.begin() + c0);
    std::copy(b.begin(), b.end(), b_out.begin() + c0);
  }
};

// Training statistics: mean and 1/sqrt(biased var + eps) into mean/invstd, the running stats (when
// given) updated with the unbiased variance, as PyTorch does.
template <typename T>
void batch_stats(const T* px, int64_t M, int64_t C, double momentum, double eps, T* mean, T* invstd, T* rm, T* rv,
                 int threads) {
  std::vector<double> sum(static_cast<size_t>(C), 0.0), sq(static_cast<size_t>(C), 0.0);
  for_blocks(C, kChannelGrain, threads, [&](int64_t c0, int64_t c1) {
    // The block's sums in arrays of its own, copied out at the end (BlockSums).
    BlockSums b(c0, c1);
    const T* x = px + c0;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < b.n; ++j) b.a[j] += x[r * C + j];
    for (int64_t j = 0; j < b.n; ++j) b.a[j] /= static_cast<double>(M);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < b.n; ++j) {
        double d = x[r * C + j] - b.a[j];
        b.b[j] += d * d;
      }
    b.copy_to(sum, sq);
  });
  for (int64_t c = 0; c < C; ++c) {
    double var = sq[c] / static_cast<double>(M);  // biased: what normalises this batch
    mean[c] = static_cast<T>(sum[c]);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
    if (rm) {
      double unbiased = var * static_cast<double>(M) / static_cast<double>(M - 1);
      rm[c] = static_cast<T>((1.0 - momentum) * rm[c] + momentum * sum[c]);
      rv[c] = static_cast<T>((1.0 - momentum) * rv[c] + momentum * unbiased);
    }
  }
}

// y = tail(x * scale + shift [+ z]) with per-channel scale = w * invstd, shift = b - mean * scale.
template <typename T, Tail tail>
void normalize(const T* px, const T* pz, const T* w, const T* b, const T* mean, const T* invstd, T* py, int64_t M,
               int64_t C, int threads) {
  std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = (w ? w[c] : T(1)) * invstd[c];
    shift[c] = (b ? b[c] : T(0)) - mean[c] * scale[c];
  }
  for_blocks(M, 1, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        T t = px[r * C + c] * scale[c] + shift[c];
        if constexpr (tail == Tail::AddRelu) t = t + pz[r * C + c];  // ops::add (fn::Add)
        if constexpr (tail != Tail::None) t = t <= T(0) ? T(0) : t;  // ops::relu_ (fn::Relu)
        py[r * C + c] = t;
      }
  });
}

// The gradient reaching the normalisation at index i: dy, or behind the ReLU fn::ReluBackward's
// y <= 0 ? 0 : dy (a NaN y passes dy). Both operands are loaded first, so the select vectorises.
template <typename T, Tail tail>
inline T tail_grad(const T* pdy, const T* py, int64_t i) {
  T g = pdy[i];
  if constexpr (tail != Tail::None) {
    const T y = py[i];
    g = y <= T(0) ? T(0) : g;
  }
  return g;
}

template <typename T, Tail tail>
void forward(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
             Tensor& running_var, bool training, double momentum, double eps, Tensor& y, Tensor& save_mean,
             Tensor& save_invstd) {
  const int64_t M = x.size(0), C = x.size(1);
  const int threads = threads_for(M * C);
  const T* px = x.data<T>();
  T* mean = save_mean.data<T>();
  T* invstd = save_invstd.data<T>();
  T* rm = opt_mut<T>(running_mean);
  T* rv = opt_mut<T>(running_var);
  if (training) {
    batch_stats(px, M, C, momentum, eps, mean, invstd, rm, rv, threads);
  } else {
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = rm[c];
      invstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
  }
  normalize<T, tail>(px, opt<T>(z), opt<T>(weight), opt<T>(bias), mean, invstd, y.data<T>(), M, C, threads);
}

// With g = tail_grad: dbias = sum g, dweight = sum g * xhat, dz = g (when defined), and dx as kernels.h
// says. sum_dy and sum_dy_xhat accumulate each channel's rows in order, in double.
template <typename T, Tail tail>
void backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& save_mean,
              const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dz, Tensor& dweight, Tensor& dbias) {
  const int64_t M = x.size(0), C = x.size(1);
  const int threads = threads_for(M * C);
  const T* px = x.data<T>();
  const T* pdy = dy.data<T>();
  const T* py = opt<T>(y);
  T* pdz = opt_mut<T>(dz);
  const T* w = opt<T>(weight);
  const T* mean = save_mean.data<T>();
  const T* invstd = save_invstd.data<T>();
  std::vector<double> sum_dy(static_cast<size_t>(C), 0.0), sum_dy_xhat(static_cast<size_t>(C), 0.0);
  // The sums pass, writing dz as it goes when asked (each loop kept free of the test, so it vectorises).
  auto sums = [&](auto write_dz) {
    for_blocks(C, kChannelGrain, threads, [&](int64_t c0, int64_t c1) {
      BlockSums b(c0, c1);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < b.n; ++j) {
          const int64_t i = r * C + c0 + j, c = c0 + j;
          const T gt = tail_grad<T, tail>(pdy, py, i);
          if constexpr (decltype(write_dz)::value) pdz[i] = gt;
          double g = gt;
          b.a[j] += g;
          b.b[j] += g * (static_cast<double>(px[i]) - mean[c]) * invstd[c];
        }
      b.copy_to(sum_dy, sum_dy_xhat);
    });
  };
  if (pdz)
    sums(std::true_type{});
  else if (training || dweight.defined() || dbias.defined())
    sums(std::false_type{});
  if (dweight.defined())
    for (int64_t c = 0; c < C; ++c) dweight.data<T>()[c] = static_cast<T>(sum_dy_xhat[c]);
  if (dbias.defined())
    for (int64_t c = 0; c < C; ++c) dbias.data<T>()[c] = static_cast<T>(sum_dy[c]);
  if (!dx.defined()) return;
  T* pdx = dx.data<T>();
  if (!training) {  // only the plain op (tail None) runs eval
    for_blocks(M, 1, threads, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) pdx[r * C + c] = pdy[r * C + c] * (w ? w[c] : T(1)) * invstd[c];
    });
    return;
  }
  std::vector<T> k(static_cast<size_t>(C)), mdy(static_cast<size_t>(C)), mdyx(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    k[c] = (w ? w[c] : T(1)) * invstd[c];
    mdy[c] = static_cast<T>(sum_dy[c] / static_cast<double>(M));
    mdyx[c] = static_cast<T>(sum_dy_xhat[c] / static_cast<double>(M));
  }
  auto dx_pass = [&](auto grad) {
    for_blocks(M, 1, threads, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) {
          T xhat = (px[r * C + c] - mean[c]) * invstd[c];
          pdx[r * C + c] = k[c] * (grad(r * C + c) - mdy[c] - xhat * mdyx[c]);
        }
    });
  };
  // dz, when written, already holds g: one stream read instead of dy and y.
  if (pdz)
    dx_pass([&](int64_t i) { return pdz[i]; });
  else
    dx_pass([&](int64_t i) { return tail_grad<T, tail>(pdy, py, i); });
}

}  // namespace

int batchnorm_cpu_threads(int64_t numel) { return cpu_parallel::kHaveOpenMP ? threads_for(numel) : 0; }

void batchnorm_forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                           Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                           Tensor& save_mean, Tensor& save_invstd) {
  TANDEM_CPU_WIDEN_16BIT(batchnorm_forward_cpu, x, weight, bias, running_mean, running_var, training, momentum, eps, y, save_mean, save_invstd);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    forward<T, Tail::None>(x, Tensor(), weight, bias, running_mean, running_var, training, momentum, eps, y,
                           save_mean, save_invstd);
  });
}

void batchnorm_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                            const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  TANDEM_CPU_WIDEN_16BIT(batchnorm_backward_cpu, dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    Tensor no_dz;
    backward<T, Tail::None>(dy, x, Tensor(), weight, save_mean, save_invstd, training, dx, no_dz, dweight, dbias);
  });
}

void batchnorm_forward_fused_cpu(ops::BatchNormTail tail, const Tensor& x, const Tensor& z, const Tensor& weight,
                                 const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    if (tail == Tail::AddRelu)
      forward<T, Tail::AddRelu>(x, z, weight, bias, running_mean, running_var, true, momentum, eps, y, save_mean,
                                save_invstd);
    else
      forward<T, Tail::Relu>(x, Tensor(), weight, bias, running_mean, running_var, true, momentum, eps, y,
                             save_mean, save_invstd);
  });
}

void batchnorm_backward_fused_cpu(ops::BatchNormTail tail, const Tensor& dy, const Tensor& x, const Tensor& y,
                                  const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                  Tensor& dx, Tensor& dz, Tensor& dweight, Tensor& dbias) {
  // Both tails mask dy the same way; AddRelu's only difference, dz, is whether dz is defined.
  (void)tail;
  TANDEM_CPU_FLOAT_TYPES(x.dtype(), T, [&] {
    backward<T, Tail::Relu>(dy, x, y, weight, save_mean, save_invstd, true, dx, dz, dweight, dbias);
  });
}

}  // namespace tandem::kernels
