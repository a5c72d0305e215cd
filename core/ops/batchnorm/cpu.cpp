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
// Threads: with OpenMP (the pool oneDNN uses, sized by core/threads.cpp) a call over enough values
// is split between the pool's threads without changing a bit (common/cpu/parallel.h), by blocks of
// channels: each channel's sums still run over its rows in order, on one thread, and each
// elementwise value is computed alone. One region a call (forward: statistics then y; backward:
// sums then dx), so one fork and one barrier. Built without OpenMP (the TSan tree,
// core/CMakeLists.txt), every call runs serially.
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

// Two per-channel sums of one block of channels [c0, c1), in arrays of the block's own: shared
// per-channel vectors had the two threads writing the cache line where their blocks meet once per
// row (the vectors are not line-aligned). Each channel's sum is the same sequence of additions.
struct BlockSums {
  int64_t n;
  std::vector<double> a, b;
  BlockSums(int64_t begin, int64_t end)
      : n(end - begin), a(static_cast<size_t>(n), 0.0), b(static_cast<size_t>(n), 0.0) {}
};

// Training statistics of channels [c0, c1): mean and 1/sqrt(biased var + eps) into mean/invstd, the
// running stats (when given) updated with the unbiased variance, as PyTorch does.
template <typename T>
void batch_stats(const T* px, int64_t M, int64_t C, int64_t c0, int64_t c1, double momentum, double eps, T* mean,
                 T* invstd, T* rm, T* rv) {
  BlockSums s(c0, c1);  // sum, then the squared deviations
  const T* x = px + c0;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < s.n; ++j) s.a[j] += x[r * C + j];
  for (int64_t j = 0; j < s.n; ++j) s.a[j] /= static_cast<double>(M);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < s.n; ++j) {
      double d = x[r * C + j] - s.a[j];
      s.b[j] += d * d;
    }
  for (int64_t j = 0; j < s.n; ++j) {
    const int64_t c = c0 + j;
    double var = s.b[j] / static_cast<double>(M);  // biased: what normalises this batch
    mean[c] = static_cast<T>(s.a[j]);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
    if (rm) {
      double unbiased = var * static_cast<double>(M) / static_cast<double>(M - 1);
      rm[c] = static_cast<T>((1.0 - momentum) * rm[c] + momentum * s.a[j]);
      rv[c] = static_cast<T>((1.0 - momentum) * rv[c] + momentum * unbiased);
    }
  }
}

// y = tail(x * scale + shift [+ z]) on channels [c0, c1) with scale = w * invstd, shift = b - mean * scale.
template <typename T, Tail tail>
void normalize(const T* px, const T* pz, const T* w, const T* b, const T* mean, const T* invstd, T* py, int64_t M,
               int64_t C, int64_t c0, int64_t c1) {
  std::vector<T> scale(static_cast<size_t>(c1 - c0)), shift(static_cast<size_t>(c1 - c0));
  for (int64_t c = c0; c < c1; ++c) {
    scale[c - c0] = (w ? w[c] : T(1)) * invstd[c];
    shift[c - c0] = (b ? b[c] : T(0)) - mean[c] * scale[c - c0];
  }
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < c1 - c0; ++j) {
      const int64_t i = r * C + c0 + j;
      T t = px[i] * scale[j] + shift[j];
      if constexpr (tail == Tail::AddRelu) t = t + pz[i];            // ops::add (fn::Add)
      if constexpr (tail != Tail::None) t = t <= T(0) ? T(0) : t;  // ops::relu_ (fn::Relu)
      py[i] = t;
    }
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

// One parallel region a call: each thread takes a block of channels through the statistics and the
// normalisation (a barrier per pass would be a stall per pass wherever the pool's threads wait for
// a core; apps/results/2026-11-28-cpu-2core/bnrelu/README.md).
template <typename T, Tail tail>
void forward(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
             Tensor& running_var, bool training, double momentum, double eps, Tensor& y, Tensor& save_mean,
             Tensor& save_invstd) {
  const int64_t M = x.size(0), C = x.size(1);
  const T* px = x.data<T>();
  T* mean = save_mean.data<T>();
  T* invstd = save_invstd.data<T>();
  T* rm = opt_mut<T>(running_mean);
  T* rv = opt_mut<T>(running_var);
  if (!training)
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = rm[c];
      invstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
  for_blocks(C, kChannelGrain, threads_for(M * C), [&](int64_t c0, int64_t c1) {
    if (training) batch_stats(px, M, C, c0, c1, momentum, eps, mean, invstd, rm, rv);
    normalize<T, tail>(px, opt<T>(z), opt<T>(weight), opt<T>(bias), mean, invstd, y.data<T>(), M, C, c0, c1);
  });
}

// With g = tail_grad: dbias = sum g, dweight = sum g * xhat, dz = g (when defined), and dx as kernels.h
// says; each channel's sums add its rows in order, in double. One parallel region, by channel blocks.
template <typename T, Tail tail>
void backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& save_mean,
              const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dz, Tensor& dweight, Tensor& dbias) {
  const int64_t M = x.size(0), C = x.size(1);
  const T* px = x.data<T>();
  const T* pdy = dy.data<T>();
  const T* py = opt<T>(y);
  T* pdz = opt_mut<T>(dz);
  T* pdx = opt_mut<T>(dx);
  T* pdw = opt_mut<T>(dweight);
  T* pdb = opt_mut<T>(dbias);
  const T* w = opt<T>(weight);
  const T* mean = save_mean.data<T>();
  const T* invstd = save_invstd.data<T>();
  const bool sums = training || pdw || pdb || pdz;
  for_blocks(C, kChannelGrain, threads_for(M * C), [&](int64_t c0, int64_t c1) {
    const int64_t n = c1 - c0;
    BlockSums s(c0, c1);  // sum g, sum g * xhat
    // The sums pass, writing dz as it goes when asked (each loop kept free of the test, so it vectorises).
    auto sum_rows = [&](auto write_dz) {
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = r * C + c0 + j, c = c0 + j;
          const T gt = tail_grad<T, tail>(pdy, py, i);
          if constexpr (decltype(write_dz)::value) pdz[i] = gt;
          double g = gt;
          s.a[j] += g;
          s.b[j] += g * (static_cast<double>(px[i]) - mean[c]) * invstd[c];
        }
    };
    if (pdz)
      sum_rows(std::true_type{});
    else if (sums)
      sum_rows(std::false_type{});
    for (int64_t j = 0; j < n; ++j) {
      if (pdw) pdw[c0 + j] = static_cast<T>(s.b[j]);
      if (pdb) pdb[c0 + j] = static_cast<T>(s.a[j]);
    }
    if (!pdx) return;
    if (!training) {  // only the plain op (tail None) runs eval
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = c0; c < c1; ++c) pdx[r * C + c] = pdy[r * C + c] * (w ? w[c] : T(1)) * invstd[c];
      return;
    }
    std::vector<T> k(static_cast<size_t>(n)), mdy(static_cast<size_t>(n)), mdyx(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      k[j] = (w ? w[c0 + j] : T(1)) * invstd[c0 + j];
      mdy[j] = static_cast<T>(s.a[j] / static_cast<double>(M));
      mdyx[j] = static_cast<T>(s.b[j] / static_cast<double>(M));
    }
    auto dx_rows = [&](auto grad) {
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = r * C + c0 + j;
          T xhat = (px[i] - mean[c0 + j]) * invstd[c0 + j];
          pdx[i] = k[j] * (grad(i) - mdy[j] - xhat * mdyx[j]);
        }
    };
    // dz, when written, already holds g: one stream read instead of dy and y.
    if (pdz)
      dx_rows([&](int64_t i) { return pdz[i]; });
    else
      dx_rows([&](int64_t i) { return tail_grad<T, tail>(pdy, py, i); });
  });
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
