// core/ops/pool/functors.h: pooling window arithmetic, shared by the CPU and CUDA kernels (internal).
//
// Both backends call these __host__ __device__ helpers, so "which input cells does output (oh, ow)
// read" and "which outputs read input (h, w)" cannot drift apart between them. Conventions follow
// PyTorch (aten/src/ATen/native/Pool.h and AdaptiveAveragePooling.cpp):
//   fixed windows:    output o covers [o*s - p, o*s - p + k), clipped to the input for reading;
//   avg divisor:      count_include_pad counts cells of the window up to H + p (so a ceil_mode
//                     window hanging past the right padding is not charged for cells beyond it),
//                     otherwise only the cells inside the input;
//   adaptive windows: output o covers [floor(o*H/OH), ceil((o+1)*H/OH)), never empty, also when
//                     OH > H (windows then overlap and repeat input cells).
// Indices are int: one image plane is far below 2^31 cells; only flat tensor offsets need 64 bits.
#pragma once
#include "core/ops/common/hd.h"

namespace tandem::pool {

// Everything a pooling kernel needs to know about its problem; passed by value to CUDA kernels.
struct Geom {
  int N = 0, H = 0, W = 0, C = 0;   // input [N, H, W, C]
  int OH = 0, OW = 0;               // output [N, OH, OW, C]
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;  // fixed windows (unused when adaptive)
  bool count_include_pad = true;   // avg only
  bool adaptive = false;           // windows from the adaptive rule instead of kernel/stride
};

TANDEM_HD int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
TANDEM_HD int imin(int a, int b) { return a < b ? a : b; }
TANDEM_HD int imax(int a, int b) { return a > b ? a : b; }

// Fixed windows along one axis: the outputs whose window covers input cell i, as [lo, hi]
// (empty when lo > hi). o*s - p <= i gives o <= (i + p) / s; o*s - p + k > i gives
// o >= floor((i + p - k) / s) + 1.
TANDEM_HD void fixed_covering(int i, int k, int s, int p, int out, int& lo, int& hi) {
  lo = imax(0, floor_div(i + p - k, s) + 1);
  hi = imin(out - 1, (i + p) / s);
}
// Adaptive windows along one axis: output o reads [start, end).
TANDEM_HD int adaptive_start(int o, int in, int out) { return static_cast<int>(static_cast<long long>(o) * in / out); }
TANDEM_HD int adaptive_end(int o, int in, int out) {
  return static_cast<int>((static_cast<long long>(o + 1) * in + out - 1) / out);
}
// Outputs whose adaptive window covers input cell i: start_o <= i iff o*in <= (i+1)*out - 1, and
// end_o > i iff (o+1)*in > i*out iff o >= floor(i*out/in).
TANDEM_HD void adaptive_covering(int i, int in, int out, int& lo, int& hi) {
  lo = static_cast<int>(static_cast<long long>(i) * out / in);
  hi = imin(out - 1, static_cast<int>((static_cast<long long>(i + 1) * out - 1) / in));
}

// The input cells [h0, h1) x [w0, w1) that output (oh, ow) reads, and the average's divisor.
TANDEM_HD void window(const Geom& g, int oh, int ow, int& h0, int& h1, int& w0, int& w1, int& divisor) {
  if (g.adaptive) {
    h0 = adaptive_start(oh, g.H, g.OH);
    h1 = adaptive_end(oh, g.H, g.OH);
    w0 = adaptive_start(ow, g.W, g.OW);
    w1 = adaptive_end(ow, g.W, g.OW);
    divisor = (h1 - h0) * (w1 - w0);
    return;
  }
  h0 = oh * g.sh - g.ph;
  w0 = ow * g.sw - g.pw;
  h1 = imin(h0 + g.kh, g.H + g.ph);
  w1 = imin(w0 + g.kw, g.W + g.pw);
  int padded = (h1 - h0) * (w1 - w0);
  h0 = imax(h0, 0);
  w0 = imax(w0, 0);
  h1 = imin(h1, g.H);
  w1 = imin(w1, g.W);
  divisor = g.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
}

// Whether a max-pool window whose best value so far is `best` (none yet: `empty`) takes cell value
// v. PyTorch's rule (v > best || isnan(v), in aten's MaxPoolKernel.cpp and DilatedMaxPool2d.cu):
// the first maximum wins ties, and every NaN takes the window, so a window holding a NaN outputs
// NaN and its last NaN in row-major order gets the gradient. v != v is isnan on both backends.
template <typename T>
TANDEM_HD bool max_takes(T v, T best, bool empty) {
  return empty || v > best || v != v;
}

// The outputs [oh0, oh1] x [ow0, ow1] whose window reads input cell (h, w).
TANDEM_HD void covering(const Geom& g, int h, int w, int& oh0, int& oh1, int& ow0, int& ow1) {
  if (g.adaptive) {
    adaptive_covering(h, g.H, g.OH, oh0, oh1);
    adaptive_covering(w, g.W, g.OW, ow0, ow1);
  } else {
    fixed_covering(h, g.kh, g.sh, g.ph, g.OH, oh0, oh1);
    fixed_covering(w, g.kw, g.sw, g.pw, g.OW, ow0, ow1);
  }
}

}  // namespace tandem::pool
