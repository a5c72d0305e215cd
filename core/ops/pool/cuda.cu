// core/ops/pool/cuda.cu: CUDA pooling on NHWC.
//
// One thread per element, channel fastest, so a warp reads 32 consecutive channels (coalesced).
// Forwards loop over the window (bounds from functors.h, shared with the CPU). Backwards
// GATHER: each input cell sums dy over the outputs whose window covers it (pool::covering). With
// overlapping windows a scatter would need atomics, which are non-deterministic for floats and
// slow for 16-bit types; the gather writes every dx element exactly once, in a fixed order.
// Loads widen to float, sums run in float, stores narrow to the tensor's dtype.
#include <cmath>

#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/pool/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::from_float;
using cuda::to_float;

// Element i of a contiguous [N, rows, cols, C] tensor: the output cell for forwards (rows, cols =
// OH, OW), the input cell for backwards (H, W).
struct Cell {
  long long n;
  int h, w, c;
};
__device__ __forceinline__ Cell unflatten(long long i, int rows, int cols, int C) {
  Cell p;
  p.c = static_cast<int>(i % C);
  long long r = i / C;
  p.w = static_cast<int>(r % cols);
  r /= cols;
  p.h = static_cast<int>(r % rows);
  p.n = r / rows;
  return p;
}

// The pooling kernels below are per-element functors; this one grid-stride kernel runs each.
template <typename Op>
__global__ void each_element_kernel(Op op, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x)
    op(i);
}

template <typename Op>
void launch(const char* what, long long total, const Op& op) {
  each_element_kernel<<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(op, total);
  CUDA_CHECK_LAUNCH(what);
}

template <typename T>
struct MaxForward {  // element i of y
  const T* x;
  T* y;
  int32_t* argmax;
  pool::Geom g;
  __device__ void operator()(long long i) const {
    const Cell o = unflatten(i, g.OH, g.OW, g.C);
    int h0, h1, w0, w1, div;
    pool::window(g, o.h, o.w, h0, h1, w0, w1, div);
    float best = -INFINITY;
    int32_t arg = -1;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) {
        float v = to_float(x[((o.n * g.H + h) * g.W + w) * g.C + o.c]);
        if (pool::max_takes(v, best, arg < 0)) {  // the CPU's rule: first maximum, last NaN
          best = v;
          arg = h * g.W + w;
        }
      }
    y[i] = from_float<T>(best);
    argmax[i] = arg;
  }
};

template <typename T>
struct AvgForward {  // element i of y
  const T* x;
  T* y;
  pool::Geom g;
  __device__ void operator()(long long i) const {
    const Cell o = unflatten(i, g.OH, g.OW, g.C);
    int h0, h1, w0, w1, div;
    pool::window(g, o.h, o.w, h0, h1, w0, w1, div);
    float acc = 0.f;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) acc += to_float(x[((o.n * g.H + h) * g.W + w) * g.C + o.c]);
    y[i] = from_float<T>(acc / static_cast<float>(div));
  }
};

// Both backwards gather: dx at input cell i sums Term's contribution of every output (oh, ow)
// whose window covers it, in row-major order; `o` is that output's flat offset in dy.
template <typename T, typename Term>
struct GatherBackward {  // element i of dx
  T* dx;
  pool::Geom g;
  Term term;
  __device__ void operator()(long long i) const {
    const Cell in = unflatten(i, g.H, g.W, g.C);
    int oh0, oh1, ow0, ow1;
    pool::covering(g, in.h, in.w, oh0, oh1, ow0, ow1);
    float acc = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) term.add(acc, ((in.n * g.OH + oh) * g.OW + ow) * g.C + in.c, in, oh, ow, g);
    dx[i] = from_float<T>(acc);
  }
};

// Max: dy goes to the cell that won the window (argmax holds its plane index h * W + w).
template <typename T>
struct MaxTerm {
  const T* dy;
  const int32_t* argmax;
  __device__ void add(float& acc, long long o, const Cell& in, int, int, const pool::Geom& g) const {
    if (argmax[o] == in.h * g.W + in.w) acc += to_float(dy[o]);
  }
};

// Average: dy is shared out evenly over the window's divisor.
template <typename T>
struct AvgTerm {
  const T* dy;
  __device__ void add(float& acc, long long o, const Cell&, int oh, int ow, const pool::Geom& g) const {
    int h0, h1, w0, w1, div;
    pool::window(g, oh, ow, h0, h1, w0, w1, div);
    acc += to_float(dy[o]) / static_cast<float>(div);
  }
};

template <typename T> const T* src(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> T* dst(Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace

void max_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax) {
  if (y.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    launch("max_pool2d forward", y.numel(), MaxForward<T>{src<T>(x), dst<T>(y), argmax.data<int32_t>(), g});
  });
}

void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx) {
  if (dx.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    launch("max_pool2d backward", dx.numel(),
           GatherBackward<T, MaxTerm<T>>{dst<T>(dx), g, MaxTerm<T>{src<T>(dy), argmax.data<int32_t>()}});
  });
}

void avg_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y) {
  if (y.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    launch("avg_pool2d forward", y.numel(), AvgForward<T>{src<T>(x), dst<T>(y), g});
  });
}

void avg_pool2d_backward_cuda(const Tensor& dy, const pool::Geom& g, Tensor& dx) {
  if (dx.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    launch("avg_pool2d backward", dx.numel(), GatherBackward<T, AvgTerm<T>>{dst<T>(dx), g, AvgTerm<T>{src<T>(dy)}});
  });
}

}  // namespace tandem::kernels
