// core/ops/cuda/pool.cu: CUDA pooling on NHWC.
//
// One thread per element, channel fastest, so a warp reads 32 consecutive channels (coalesced).
// Forwards loop over the window (bounds from pool_functors.h, shared with the CPU). Backwards
// GATHER: each input cell sums dy over the outputs whose window covers it (pool::covering). With
// overlapping windows a scatter would need atomics, which are non-deterministic for floats and
// slow for 16-bit types; the gather writes every dx element exactly once, in a fixed order.
// Loads widen to float, sums run in float, stores narrow to the tensor's dtype.
#include <cmath>

#include "core/ops/cuda/dispatch.cuh"
#include "core/ops/kernels/pool.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

template <typename T>
__global__ void max_fwd_kernel(const T* x, T* y, int32_t* argmax, pool::Geom g, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % g.C);
    long long r = i / g.C;
    int ow = static_cast<int>(r % g.OW);
    r /= g.OW;
    int oh = static_cast<int>(r % g.OH);
    long long n = r / g.OH;
    int h0, h1, w0, w1, div;
    pool::window(g, oh, ow, h0, h1, w0, w1, div);
    float best = -INFINITY;
    int32_t arg = -1;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) {
        float v = to_float(x[((n * g.H + h) * g.W + w) * g.C + c]);
        // Same rule as the CPU: first maximum wins, a NaN wins once and sticks.
        if (arg < 0 || v > best || (isnan(v) && !isnan(best))) {
          best = v;
          arg = h * g.W + w;
        }
      }
    y[i] = from_float<T>(best);
    argmax[i] = arg;
  }
}

template <typename T>
__global__ void max_bwd_kernel(const T* dy, const int32_t* argmax, T* dx, pool::Geom g, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % g.C);
    long long r = i / g.C;
    int w = static_cast<int>(r % g.W);
    r /= g.W;
    int h = static_cast<int>(r % g.H);
    long long n = r / g.H;
    int oh0, oh1, ow0, ow1;
    pool::covering(g, h, w, oh0, oh1, ow0, ow1);
    int32_t me = h * g.W + w;
    float acc = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        long long o = ((n * g.OH + oh) * g.OW + ow) * g.C + c;
        if (argmax[o] == me) acc += to_float(dy[o]);
      }
    dx[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void avg_fwd_kernel(const T* x, T* y, pool::Geom g, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % g.C);
    long long r = i / g.C;
    int ow = static_cast<int>(r % g.OW);
    r /= g.OW;
    int oh = static_cast<int>(r % g.OH);
    long long n = r / g.OH;
    int h0, h1, w0, w1, div;
    pool::window(g, oh, ow, h0, h1, w0, w1, div);
    float acc = 0.f;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) acc += to_float(x[((n * g.H + h) * g.W + w) * g.C + c]);
    y[i] = from_float<T>(acc / static_cast<float>(div));
  }
}

template <typename T>
__global__ void avg_bwd_kernel(const T* dy, T* dx, pool::Geom g, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int c = static_cast<int>(i % g.C);
    long long r = i / g.C;
    int w = static_cast<int>(r % g.W);
    r /= g.W;
    int h = static_cast<int>(r % g.H);
    long long n = r / g.H;
    int oh0, oh1, ow0, ow1;
    pool::covering(g, h, w, oh0, oh1, ow0, ow1);
    float acc = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) {
        int h0, h1, w0, w1, div;
        pool::window(g, oh, ow, h0, h1, w0, w1, div);
        acc += to_float(dy[((n * g.OH + oh) * g.OW + ow) * g.C + c]) / static_cast<float>(div);
      }
    dx[i] = from_float<T>(acc);
  }
}

}  // namespace

void max_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax) {
  long long total = y.numel();
  if (total == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    max_fwd_kernel<T><<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), argmax.data<int32_t>(), g, total);
    CUDA_CHECK_LAUNCH("max_pool2d forward");
  });
}

void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx) {
  long long total = dx.numel();
  if (total == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    max_bwd_kernel<T><<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(dy.data_ptr()), argmax.data<int32_t>(), static_cast<T*>(dx.data_ptr()), g, total);
    CUDA_CHECK_LAUNCH("max_pool2d backward");
  });
}

void avg_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y) {
  long long total = y.numel();
  if (total == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    avg_fwd_kernel<T><<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), g, total);
    CUDA_CHECK_LAUNCH("avg_pool2d forward");
  });
}

void avg_pool2d_backward_cuda(const Tensor& dy, const pool::Geom& g, Tensor& dx) {
  long long total = dx.numel();
  if (total == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    avg_bwd_kernel<T><<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(
        static_cast<const T*>(dy.data_ptr()), static_cast<T*>(dx.data_ptr()), g, total);
    CUDA_CHECK_LAUNCH("avg_pool2d backward");
  });
}

}  // namespace tandem::kernels
