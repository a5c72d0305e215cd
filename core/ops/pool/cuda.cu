// core/ops/pool/cuda.cu: CUDA pooling on NHWC.
//
// One thread per channel group: V consecutive channels (V a power of two up to 16 bytes of T: 8
// bf16/f16 or 4 f32 channels) of one output cell for forwards, of one input cell for backwards,
// moved with one V-element access (cuda::Pack), so a warp moves 32 x 16 contiguous bytes. V is the
// widest such width that divides C and the pointers' alignment allows (C = 3 gives V = 1, C = 6 in
// bf16 V = 2). Forwards loop over the window (bounds from functors.h, shared with the CPU).
// Backwards GATHER: each input cell sums dy over the outputs whose window covers it
// (pool::covering: at most ceil(k / s)^2 of them, 4 for ResNet's 3x3/2 stem pool). With
// overlapping windows a scatter would need atomics, which are non-deterministic for floats and
// slow for 16-bit types; the gather writes every dx element exactly once, in a fixed order, and
// for max pooling reads the saved argmax of each covering window (dy only where it names this
// cell), so one pass reads dy and argmax and writes dx, with no pre-zeroing.
// Decision (issue 18): tandem's kernels, not cuDNN's pooling. cuDNN's max-pool backward takes x,
// y and dy and recomputes the argmax (3 reads of full-size tensors against dy + argmax at a
// quarter size here), and its forward saves nothing we could reuse; the saved int32 index is
// PyTorch's design too (PyTorch saves int64).
// Loads widen to float, sums run in float, stores narrow to the tensor's dtype. Flat indices are
// 32-bit when the grid has fewer than 2^31 channel groups (64-bit divisions are the slow part of
// the index arithmetic), else 64-bit.
#include <climits>
#include <cmath>

#include "core/ops/common/cuda/dispatch.cuh"
#include "core/ops/common/cuda/pack.cuh"
#include "core/ops/common/cuda/pack_width.h"
#include "core/ops/common/cuda/vector_access.cuh"
#include "core/ops/pool/kernels.h"

namespace tandem::kernels {
namespace {
using cuda::Pack;
using cuda::from_float;
using cuda::to_float;

// Channel group i of a contiguous [N, rows, cols, C] tensor in groups of V channels: the output
// cell for forwards (rows, cols = OH, OW), the input cell for backwards (H, W). c is the group's
// first channel; the group's first element is at flat offset i * V.
struct Cell {
  long long n;
  int h, w, c;
};
template <typename Idx>
__device__ __forceinline__ Cell unflatten(Idx i, int rows, int cols, int groups, int V) {
  Cell p;
  p.c = static_cast<int>(i % static_cast<Idx>(groups)) * V;
  Idx r = i / static_cast<Idx>(groups);
  p.w = static_cast<int>(r % static_cast<Idx>(cols));
  r /= static_cast<Idx>(cols);
  p.h = static_cast<int>(r % static_cast<Idx>(rows));
  p.n = static_cast<long long>(r / static_cast<Idx>(rows));
  return p;
}

// The pooling kernels below are per-group functors; this one grid-stride kernel runs each.
template <typename Op, typename Idx>
__global__ void each_group_kernel(Op op, Idx total) {
  for (Idx i = blockIdx.x * (Idx)blockDim.x + threadIdx.x; i < total; i += (Idx)gridDim.x * blockDim.x) op(i);
}

// Runs make(V)'s functor over the numel / V channel groups of a tensor of C channels.
template <typename T, typename Make>
void launch(const char* what, long long numel, int C, std::initializer_list<const void*> ptrs, Make&& make) {
  cuda::with_pow2<cuda::kVec<T>>(cuda::channel_group_width(C, sizeof(T), ptrs), [&](auto V) {
    const long long total = numel / decltype(V)::value;
    const auto op = make(V);
    if (total <= INT_MAX)
      each_group_kernel<<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(op, static_cast<unsigned>(total));
    else
      each_group_kernel<<<cuda::grid_for(total), 256, 0, cuda::compute_stream()>>>(op, total);
  });
  CUDA_CHECK_LAUNCH(what);
}

// Calls f(offset, plane) for each input cell of output o's window (offset: the flat offset of the
// cell's channel o.c; plane: h * W + w) in row-major order, and returns the average's divisor.
template <typename F>
__device__ __forceinline__ int each_window_cell(const pool::Geom& g, const Cell& o, F&& f) {
  int h0, h1, w0, w1, div;
  pool::window(g, o.h, o.w, h0, h1, w0, w1, div);
  for (int h = h0; h < h1; ++h)
    for (int w = w0; w < w1; ++w) f(((o.n * g.H + h) * g.W + w) * g.C + o.c, h * g.W + w);
  return div;
}

template <typename T, int V>
struct MaxForward {  // channel group i of y
  const T* x;
  T* y;
  int32_t* argmax;
  pool::Geom g;
  template <typename Idx>
  __device__ void operator()(Idx i) const {
    const Cell o = unflatten(i, g.OH, g.OW, g.C / V, V);
    float best[V];
    Pack<int32_t, V> arg;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      best[e] = -INFINITY;
      arg.v[e] = -1;
    }
    each_window_cell(g, o, [&](long long off, int plane) {
      const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(x + off);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float f = to_float(v.v[e]);
        if (pool::max_takes(f, best[e], arg.v[e] < 0)) {  // the CPU's rule: first maximum, last NaN
          best[e] = f;
          arg.v[e] = plane;
        }
      }
    });
    Pack<T, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(best[e]);
    reinterpret_cast<Pack<T, V>*>(y)[i] = out;
    reinterpret_cast<Pack<int32_t, V>*>(argmax)[i] = arg;
  }
};

template <typename T, int V>
struct AvgForward {  // channel group i of y
  const T* x;
  T* y;
  pool::Geom g;
  template <typename Idx>
  __device__ void operator()(Idx i) const {
    const Cell o = unflatten(i, g.OH, g.OW, g.C / V, V);
    float acc[V] = {};
    const int div = each_window_cell(g, o, [&](long long off, int) {
      const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(x + off);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += to_float(v.v[e]);
    });
    Pack<T, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(acc[e] / static_cast<float>(div));
    reinterpret_cast<Pack<T, V>*>(y)[i] = out;
  }
};

// Both backwards gather: dx at input channel group i sums Term's contribution of every output
// (oh, ow) whose window covers it, in row-major order; `o` is that output's flat offset in dy.
template <typename T, int V, typename Term>
struct GatherBackward {  // channel group i of dx
  T* dx;
  pool::Geom g;
  Term term;
  template <typename Idx>
  __device__ void operator()(Idx i) const {
    const Cell in = unflatten(i, g.H, g.W, g.C / V, V);
    int oh0, oh1, ow0, ow1;
    pool::covering(g, in.h, in.w, oh0, oh1, ow0, ow1);
    float acc[V] = {};
    for (int oh = oh0; oh <= oh1; ++oh)
      for (int ow = ow0; ow <= ow1; ++ow) term.add(acc, ((in.n * g.OH + oh) * g.OW + ow) * g.C + in.c, in, oh, ow, g);
    Pack<T, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(acc[e]);
    reinterpret_cast<Pack<T, V>*>(dx)[i] = out;
  }
};

// Max: dy goes to the cell that won the window (argmax holds its plane index h * W + w). dy is
// read only when some channel of the group was won by this cell.
template <typename T, int V>
struct MaxTerm {
  const T* dy;
  const int32_t* argmax;
  __device__ void add(float (&acc)[V], long long o, const Cell& in, int, int, const pool::Geom& g) const {
    const Pack<int32_t, V> a = *reinterpret_cast<const Pack<int32_t, V>*>(argmax + o);
    const int32_t plane = in.h * g.W + in.w;
    bool won = false;
#pragma unroll
    for (int e = 0; e < V; ++e) won |= a.v[e] == plane;
    if (!won) return;
    const Pack<T, V> d = *reinterpret_cast<const Pack<T, V>*>(dy + o);
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (a.v[e] == plane) acc[e] += to_float(d.v[e]);
  }
};

// Average: dy is shared out evenly over the window's divisor.
template <typename T, int V>
struct AvgTerm {
  const T* dy;
  __device__ void add(float (&acc)[V], long long o, const Cell&, int oh, int ow, const pool::Geom& g) const {
    int h0, h1, w0, w1, div;
    pool::window(g, oh, ow, h0, h1, w0, w1, div);
    const Pack<T, V> d = *reinterpret_cast<const Pack<T, V>*>(dy + o);
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += to_float(d.v[e]) / static_cast<float>(div);
  }
};

template <typename T> const T* src(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> T* dst(Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace

void max_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y, Tensor& argmax) {
  if (y.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    launch<T>("max_pool2d forward", y.numel(), g.C, {x.data_ptr(), y.data_ptr(), argmax.data_ptr()}, [&](auto V) {
      return MaxForward<T, decltype(V)::value>{src<T>(x), dst<T>(y), argmax.data<int32_t>(), g};
    });
  });
}

void max_pool2d_backward_cuda(const Tensor& dy, const Tensor& argmax, const pool::Geom& g, Tensor& dx) {
  if (dx.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    launch<T>("max_pool2d backward", dx.numel(), g.C, {dy.data_ptr(), argmax.data_ptr(), dx.data_ptr()},
              [&](auto V) {
                constexpr int v = decltype(V)::value;
                const MaxTerm<T, v> term{src<T>(dy), argmax.data<int32_t>()};
                return GatherBackward<T, v, MaxTerm<T, v>>{dst<T>(dx), g, term};
              });
  });
}

void avg_pool2d_forward_cuda(const Tensor& x, const pool::Geom& g, Tensor& y) {
  if (y.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(x.dtype(), T, [&] {
    launch<T>("avg_pool2d forward", y.numel(), g.C, {x.data_ptr(), y.data_ptr()},
              [&](auto V) { return AvgForward<T, decltype(V)::value>{src<T>(x), dst<T>(y), g}; });
  });
}

void avg_pool2d_backward_cuda(const Tensor& dy, const pool::Geom& g, Tensor& dx) {
  if (dx.numel() == 0) return;
  TANDEM_CUDA_FLOAT_TYPES(dy.dtype(), T, [&] {
    launch<T>("avg_pool2d backward", dx.numel(), g.C, {dy.data_ptr(), dx.data_ptr()}, [&](auto V) {
      constexpr int v = decltype(V)::value;
      return GatherBackward<T, v, AvgTerm<T, v>>{dst<T>(dx), g, AvgTerm<T, v>{src<T>(dy)}};
    });
  });
}

}  // namespace tandem::kernels
