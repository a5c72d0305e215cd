// apps/bench_ops_cpu_conv.h: bench_ops' CPU convolution rows (included by apps/bench_ops.cpp only).
//
// Every conv shape of ResNet-18 at 64 px (batch 32, the CPU peer's row), of resnet_tiny (the main
// job's model, same size and batch) and, with `vgg`, VGG-16's last three at 64 px (the peer's VGG
// row; its deep, small-image layers are where the layout choice matters; seconds per repetition, so
// not in CI's smoke run), forward, backward data and backward filter, f32, timed three ways
// with the runs interleaved (one of each per repetition, so load from other processes hits all three
// alike), medians reported:
//   tandem   the CPU entry points the conv op calls (kernels::conv2d_*_cpu: oneDNN where the build
//            has it, with tandem's primitive cache and per-call weight reorders to and from OHWI);
//   onednn   oneDNN called directly, primitives built once with every layout left to oneDNN (format
//            any: its blocked layouts), inputs reordered before timing: the library's ceiling;
//   im2col   the same entry points with BackendConfig::cpu_onednn off: the im2col + OpenBLAS reference.
// Clock: wall time by default; --cpu-clock process times each call by the process's CPU time
// (CLOCK_PROCESS_CPUTIME_ID, all threads summed), which on a shared machine leaves out the time the
// bench waited for a core while other processes ran - the only sound figure under load at 1 thread.
// Ratios are times: onednn/tandem >= 0.95 is the target (tandem within 5 % of the library),
// im2col/tandem is the speed-up over the reference.
#pragma once
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "apps/bench_ops_cpu_timing.h"  // defines: interleaved_median_ms, DirectPrimitive
#include "core/backend.h"
#include "core/ops/conv/cpu_onednn.h"
#include "core/ops/conv/kernels.h"
#include "core/tensor.h"

#if TANDEM_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tandem::cpu_bench {

struct CpuConvShape {
  const char* model;
  const char* name;
  int64_t h, c, o, k;
  int stride;
};

inline kernels::ConvGeom cpu_conv_geom(const CpuConvShape& s, int64_t n) {
  kernels::ConvGeom g;
  g.p.stride_h = g.p.stride_w = s.stride;
  g.p.pad_h = g.p.pad_w = static_cast<int>(s.k / 2);
  g.n = n, g.h = g.w = s.h, g.c = s.c, g.o = s.o, g.kh = g.kw = s.k;
  g.oh = g.ow = (s.h + 2 * (s.k / 2) - s.k) / s.stride + 1;
  return g;
}

#if TANDEM_HAVE_ONEDNN
// oneDNN at its best for one problem and direction: primitive built once, all layouts its own, its
// buffers allocated and filled once; run() executes the primitive alone.
class DirectConv : public DirectPrimitive {
 public:
  DirectConv(const kernels::ConvGeom& g, int dir) {
    using md = dnnl::memory::desc;
    const auto f32 = dnnl::memory::data_type::f32;
    const auto any = dnnl::memory::format_tag::any;
    md x({g.n, g.c, g.h, g.w}, f32, any), w({g.o, g.c, g.kh, g.kw}, f32, any), y({g.n, g.o, g.oh, g.ow}, f32, any);
    const dnnl::memory::dims st{g.p.stride_h, g.p.stride_w}, dl{0, 0}, pl{g.p.pad_h, g.p.pad_w},
        pr{(g.oh - 1) * g.p.stride_h + g.kh - g.h - g.p.pad_h, (g.ow - 1) * g.p.stride_w + g.kw - g.w - g.p.pad_w};
    dnnl::convolution_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x, w, y, st, dl, pl, pr}, eng_);
    auto fill = [&](const md& d) {
      dnnl::memory m(d, eng_);
      auto* p = static_cast<float*>(m.get_data_handle());
      for (size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = 0.01f;
      return m;
    };
    if (dir == 0) {
      prim_ = dnnl::convolution_forward(fwd);
      args_ = {{DNNL_ARG_SRC, fill(fwd.src_desc())}, {DNNL_ARG_WEIGHTS, fill(fwd.weights_desc())},
               {DNNL_ARG_DST, fill(fwd.dst_desc())}};
    } else if (dir == 1) {
      dnnl::convolution_backward_data::primitive_desc pd(
          {dnnl::algorithm::convolution_direct, x, w, y, st, dl, pl, pr}, eng_, fwd);
      prim_ = dnnl::convolution_backward_data(pd);
      args_ = {{DNNL_ARG_DIFF_DST, fill(pd.diff_dst_desc())}, {DNNL_ARG_WEIGHTS, fill(pd.weights_desc())},
               {DNNL_ARG_DIFF_SRC, fill(pd.diff_src_desc())}};
    } else {
      dnnl::convolution_backward_weights::primitive_desc pd(
          {dnnl::algorithm::convolution_direct, x, w, y, st, dl, pl, pr}, eng_, fwd);
      prim_ = dnnl::convolution_backward_weights(pd);
      args_ = {{DNNL_ARG_SRC, fill(pd.src_desc())}, {DNNL_ARG_DIFF_DST, fill(pd.diff_dst_desc())},
               {DNNL_ARG_DIFF_WEIGHTS, fill(pd.diff_weights_desc())}};
    }
  }
};
#endif

// `only`: run the rows whose "model conv" contains it (empty: all).
inline void cpu_conv_part(int reps, int64_t batch, bool process_cpu, const std::string& only, bool vgg,
                          bool resnet50, nlohmann::json& rows) {
  // ResNet-18 at 64 px: stem 64 -> 32, maxpool -> 16; resnet_tiny: the same at a quarter the width.
  const CpuConvShape shapes[] = {
      {"resnet18", "stem 7x7/2 3->64 @64", 64, 3, 64, 7, 2},  {"resnet18", "3x3 64->64 @16", 16, 64, 64, 3, 1},
      {"resnet18", "3x3/2 64->128 @16", 16, 64, 128, 3, 2},   {"resnet18", "1x1/2 64->128 @16", 16, 64, 128, 1, 2},
      {"resnet18", "3x3 128->128 @8", 8, 128, 128, 3, 1},     {"resnet18", "3x3/2 128->256 @8", 8, 128, 256, 3, 2},
      {"resnet18", "1x1/2 128->256 @8", 8, 128, 256, 1, 2},   {"resnet18", "3x3 256->256 @4", 4, 256, 256, 3, 1},
      {"resnet18", "3x3/2 256->512 @4", 4, 256, 512, 3, 2},   {"resnet18", "1x1/2 256->512 @4", 4, 256, 512, 1, 2},
      {"resnet18", "3x3 512->512 @2", 2, 512, 512, 3, 1},     {"resnet_tiny", "stem 7x7/2 3->16 @64", 64, 3, 16, 7, 2},
      {"resnet_tiny", "3x3 16->16 @16", 16, 16, 16, 3, 1},    {"resnet_tiny", "3x3/2 16->32 @16", 16, 16, 32, 3, 2},
      {"resnet_tiny", "1x1/2 16->32 @16", 16, 16, 32, 1, 2},  {"resnet_tiny", "3x3 32->32 @8", 8, 32, 32, 3, 1},
      {"resnet_tiny", "3x3/2 32->64 @8", 8, 32, 64, 3, 2},    {"resnet_tiny", "1x1/2 32->64 @8", 8, 32, 64, 1, 2},
      {"resnet_tiny", "3x3 64->64 @4", 4, 64, 64, 3, 1},      {"resnet_tiny", "3x3/2 64->128 @4", 4, 64, 128, 3, 2},
      {"resnet_tiny", "1x1/2 64->128 @4", 4, 64, 128, 1, 2},  {"resnet_tiny", "3x3 128->128 @2", 2, 128, 128, 3, 1},
      {"vgg16", "3x3 256->512 @8", 8, 256, 512, 3, 1},        {"vgg16", "3x3 512->512 @8", 8, 512, 512, 3, 1},
      {"vgg16", "3x3 512->512 @4", 4, 512, 512, 3, 1},
      // ResNet-50 at 224 px (the CPU peer's row): every distinct conv of its stem and bottlenecks.
      {"resnet50", "stem 7x7/2 3->64 @224", 224, 3, 64, 7, 2},  {"resnet50", "1x1 64->64 @56", 56, 64, 64, 1, 1},
      {"resnet50", "3x3 64->64 @56", 56, 64, 64, 3, 1},          {"resnet50", "1x1 64->256 @56", 56, 64, 256, 1, 1},
      {"resnet50", "1x1 256->64 @56", 56, 256, 64, 1, 1},        {"resnet50", "1x1 256->128 @56", 56, 256, 128, 1, 1},
      {"resnet50", "3x3/2 128->128 @56", 56, 128, 128, 3, 2},    {"resnet50", "1x1/2 256->512 @56", 56, 256, 512, 1, 2},
      {"resnet50", "3x3 128->128 @28", 28, 128, 128, 3, 1},      {"resnet50", "1x1 128->512 @28", 28, 128, 512, 1, 1},
      {"resnet50", "1x1 512->128 @28", 28, 512, 128, 1, 1},      {"resnet50", "1x1 512->256 @28", 28, 512, 256, 1, 1},
      {"resnet50", "3x3/2 256->256 @28", 28, 256, 256, 3, 2},    {"resnet50", "1x1/2 512->1024 @28", 28, 512, 1024, 1, 2},
      {"resnet50", "3x3 256->256 @14", 14, 256, 256, 3, 1},      {"resnet50", "1x1 256->1024 @14", 14, 256, 1024, 1, 1},
      {"resnet50", "1x1 1024->256 @14", 14, 1024, 256, 1, 1},    {"resnet50", "1x1 1024->512 @14", 14, 1024, 512, 1, 1},
      {"resnet50", "3x3/2 512->512 @14", 14, 512, 512, 3, 2},    {"resnet50", "1x1/2 1024->2048 @14", 14, 1024, 2048, 1, 2},
      {"resnet50", "3x3 512->512 @7", 7, 512, 512, 3, 1},        {"resnet50", "1x1 512->2048 @7", 7, 512, 2048, 1, 1},
      {"resnet50", "1x1 2048->512 @7", 7, 2048, 512, 1, 1}};
  const char* dirs[] = {"fwd", "bwd_data", "bwd_filter"};
  std::printf("\nCPU conv2d, f32, NHWC, batch %lld (tandem = oneDNN %s; %s ms, medians of %d interleaved runs)\n",
              (long long)batch, kernels::onednn_built() ? "built in" : "NOT built: the reference",
              process_cpu ? "process CPU" : "wall", reps);
  std::printf("  %-11s %-24s %-10s %9s %9s %9s  %14s  %14s\n", "model", "conv", "direction", "tandem", "onednn",
              "im2col", "onednn/tandem", "im2col/tandem");
  for (const CpuConvShape& s : shapes) {
    if (!only.empty() && (std::string(s.model) + " " + s.name).find(only) == std::string::npos) continue;
    if (!vgg && std::string(s.model) == "vgg16") continue;
    if (!resnet50 && std::string(s.model) == "resnet50") continue;
    const kernels::ConvGeom g = cpu_conv_geom(s, batch);
    Tensor x = Tensor::full({g.n, g.h, g.w, g.c}, 0.01), w = Tensor::full({g.o, g.kh, g.kw, g.c}, 0.01);
    Tensor y = Tensor::full({g.n, g.oh, g.ow, g.o}, 0.01), dx = Tensor::empty_like(x), dw = Tensor::empty_like(w);
    for (int d = 0; d < 3; ++d) {
      auto tandem_call = [&] {
        if (d == 0) kernels::conv2d_forward_cpu(g, x, w, y);
        if (d == 1) kernels::conv2d_backward_data_cpu(g, y, w, dx);
        if (d == 2) kernels::conv2d_backward_filter_cpu(g, x, y, dw);
      };
      auto im2col_call = [&] {
        BackendScope ref(&BackendConfig::cpu_onednn, false);
        tandem_call();
      };
      double t_direct = 0;
      std::vector<double> t;
#if TANDEM_HAVE_ONEDNN
      DirectConv direct(g, d);
      t = interleaved_median_ms(reps, process_cpu, tandem_call, [&] { direct.run(); }, im2col_call);
      t_direct = t[1];
#else
      t = interleaved_median_ms(reps, process_cpu, tandem_call, im2col_call);
      t.insert(t.begin() + 1, 0.0);
#endif
      std::printf("  %-11s %-24s %-10s %9.3f %9.3f %9.3f  %14.2f  %14.2f\n", s.model, s.name, dirs[d], t[0], t_direct,
                  t[2], t_direct / t[0], t[2] / t[0]);
      rows.push_back({{"part", "cpu_conv"}, {"model", s.model}, {"name", s.name}, {"direction", dirs[d]},
                      {"dtype", "f32"}, {"batch", batch}, {"clock", process_cpu ? "process_cpu" : "wall"},
                      {"tandem_ms", t[0]}, {"onednn_ms", t_direct},
                      {"im2col_ms", t[2]}, {"onednn_over_tandem", t_direct / t[0]},
                      {"im2col_over_tandem", t[2] / t[0]},
                      // bench_ops' common columns (ratio = tandem / direct): the direct call is oneDNN's
                      // where the build has it, else the im2col reference that tandem then runs.
                      {"direct_ms", t_direct > 0 ? t_direct : t[2]},
                      {"ratio", t[0] / (t_direct > 0 ? t_direct : t[2])}});
    }
  }
}

}  // namespace tandem::cpu_bench
