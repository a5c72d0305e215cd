// core/ops/conv/cpu_onednn.cpp: conv2d forward / backward-data / backward-filter on the CPU through
// oneDNN (Debian's libdnnl 2.6, its v2 API; third_party/README.md says why that package), with each
// problem's primitive cached.
//
// Layouts: activations stay NHWC (format_tag nhwc: oneDNN's JIT kernels read and write it as is, so
// no activation is ever reordered). The OHWI weight is described with strides (dims [O, C, KH, KW],
// or [G, O/G, C/G, KH, KW] when grouped); the primitive picks its own blocked weight layout
// (format_tag any) and the weight, or its gradient, is reordered per call - a pass over the weight
// only, which is small beside the activations.
// Precision: f32 and bf16 (oneDNN accumulates in f32 and rounds each output once, as the widened
// reference does); f16 and f64 are answered with false (f64: gradient checks stay on the im2col
// reference; f16: no f16 CPU kernels in oneDNN 2.6 off AVX512-FP16 hardware).
// Caching: creating a primitive descriptor walks oneDNN's implementation list and JIT-compiles the
// kernel (about a millisecond), so the primitive is kept per problem, keyed like the cuDNN plan cache
// (core/ops/conv/cuda.cpp): geometry, dtype, direction, plus the OpenMP thread count, as oneDNN
// sizes its work split when the primitive is created. A problem oneDNN refuses is remembered and
// answered with false; the caller then runs the im2col reference (core/ops/conv/cpu.cpp).
// Scratchpad: user-managed, one buffer per calling thread, so primitives may run on several threads
// at once (thread ranks in tests) without sharing oneDNN's library-owned scratchpad.
#include "core/ops/conv/cpu_onednn.h"

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>
#endif

#include "core/backend.h"

namespace tandem::kernels {

#if TANDEM_HAVE_ONEDNN
namespace {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;

enum class Dir { Forward, BackwardData, BackwardFilter };

// What identifies one primitive, as PlanKey does for cuDNN plans.
struct Key {
  int64_t n, h, w, c, o, kh, kw, oh, ow;
  int sh, sw, ph, pw, dh, dw, groups;
  DType dtype;
  Dir dir;
  int threads;
  auto tie() const { return std::tie(n, h, w, c, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, dtype, dir, threads); }
  bool operator<(const Key& k) const { return tie() < k.tie(); }
};

// A cached problem: the primitive (empty: oneDNN refused the problem), the weight layout it wants and
// the reorder between that layout and tandem's OHWI (user -> primitive for forward and backward data,
// primitive -> user for backward filter; empty when the layouts already agree).
struct Entry {
  bool ok = false;
  dnnl::primitive prim;
  memory::desc prim_w, user_w;
  bool reorder_needed = false;
  dnnl::reorder reorder;
  memory::desc scratch;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::data_type dnnl_type(DType t) { return t == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32; }

// The descriptors and geometry all three directions share.
struct Descs {
  memory::desc x, y, w_any, w_user;
  memory::dims strides, dilates, pad_l, pad_r;
};

Descs descs(const ConvGeom& g, DType dt) {
  const auto& p = g.p;
  const auto t = dnnl_type(dt);
  const int64_t grp = p.groups, cg = g.c / grp, og = g.o / grp;
  Descs d;
  d.x = memory::desc({g.n, g.c, g.h, g.w}, t, Tag::nhwc);
  d.y = memory::desc({g.n, g.o, g.oh, g.ow}, t, Tag::nhwc);
  // OHWI by strides: o -> KH KW Cg, c -> 1, kh -> KW Cg, kw -> Cg.
  if (grp == 1) {
    d.w_user = memory::desc({g.o, g.c, g.kh, g.kw}, t, memory::dims{g.kh * g.kw * cg, 1, g.kw * cg, cg});
    d.w_any = memory::desc({g.o, g.c, g.kh, g.kw}, t, Tag::any);
  } else {
    d.w_user = memory::desc({grp, og, cg, g.kh, g.kw}, t,
                            memory::dims{og * g.kh * g.kw * cg, g.kh * g.kw * cg, 1, g.kw * cg, cg});
    d.w_any = memory::desc({grp, og, cg, g.kh, g.kw}, t, Tag::any);
  }
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dilation_h - 1, p.dilation_w - 1};  // oneDNN counts dilation from 0
  d.pad_l = {p.pad_h, p.pad_w};
  // The right/bottom padding that makes oneDNN's output size equal ours (may be negative when the
  // stride leaves input rows unread, as floor division in ConvGeom does).
  d.pad_r = {(g.oh - 1) * p.stride_h + (g.kh - 1) * p.dilation_h + 1 - g.h - p.pad_h,
             (g.ow - 1) * p.stride_w + (g.kw - 1) * p.dilation_w + 1 - g.w - p.pad_w};
  return d;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d) {
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.x,
                                     d.w_any, d.y, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(fd, user_scratchpad(), engine());
}

Entry build(const ConvGeom& g, DType dt, Dir dir) {
  Entry e;
  const Descs d = descs(g, dt);
  e.user_w = d.w_user;
  const auto fwd = forward_pd(d);
  if (dir == Dir::Forward) {
    e.prim = dnnl::convolution_forward(fwd);
    e.prim_w = fwd.weights_desc();
    e.scratch = fwd.scratchpad_desc();
  } else if (dir == Dir::BackwardData) {
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, d.x, d.w_any, d.y, d.strides,
                                             d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(bd, user_scratchpad(), engine(), fwd);
    e.prim = dnnl::convolution_backward_data(pd);
    e.prim_w = pd.weights_desc();
    e.scratch = pd.scratchpad_desc();
  } else {
    dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, d.x, d.w_any, d.y, d.strides,
                                                d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(wd, user_scratchpad(), engine(), fwd);
    e.prim = dnnl::convolution_backward_weights(pd);
    e.prim_w = pd.diff_weights_desc();
    e.scratch = pd.scratchpad_desc();
  }
  e.reorder_needed = e.prim_w != e.user_w;
  if (e.reorder_needed)
    e.reorder = dir == Dir::BackwardFilter
                    ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), e.prim_w, engine(), e.user_w))
                    : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), e.user_w, engine(), e.prim_w));
  e.ok = true;
  return e;
}

// The cached entry for a problem (built on first sight; a refusal is cached as !ok).
const Entry& entry(const ConvGeom& g, DType dt, Dir dir) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Entry>> cache;
  const auto& p = g.p;
  Key k{g.n,        g.h,        g.w,        g.c,          g.o,          g.kh,     g.kw, g.oh, g.ow, p.stride_h,
        p.stride_w, p.pad_h,    p.pad_w,    p.dilation_h, p.dilation_w, p.groups, dt,   dir,  omp_get_max_threads()};
  std::lock_guard lock(mu);
  auto& slot = cache[k];
  if (!slot) {
    slot = std::make_unique<Entry>();
    try {
      *slot = build(g, dt, dir);
    } catch (const dnnl::error&) {
      slot->ok = false;  // unimplemented for this problem: the im2col reference runs it
    }
  }
  return *slot;
}

bool usable(const ConvGeom& g, const Tensor& t) {
  const bool empty = g.n == 0 || g.c == 0 || g.o == 0 || g.oh == 0 || g.ow == 0;
  return backend().cpu_onednn && !empty && (t.dtype() == DType::F32 || t.dtype() == DType::BF16);
}

// A per-thread buffer, grown as needed and never shrunk: allocating the scratchpad or a blocked
// weight (up to 9 MiB for ResNet's 512-channel 3x3) per call costs a page fault per 4 KiB touched,
// which on the deep layers' small images took as long as the convolution.
struct Buffer {
  std::vector<uint8_t> bytes;
  void* get(size_t n) {
    constexpr size_t kAlign = 64;  // a cache line: what oneDNN's own allocations use
    if (bytes.size() < n + kAlign) bytes.resize(n + kAlign);
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + ((kAlign - p % kAlign) % kAlign);
  }
};

// Runs a cached entry: `a` holds the primitive's activation arguments; the weight argument (`w_arg`)
// goes through the entry's reorder where its layout differs from OHWI.
bool run(const Entry& e, std::unordered_map<int, memory> a, int w_arg, void* user_w) {
  thread_local Buffer scratch_buf, weight_buf;
  thread_local dnnl::stream stream(engine());
  a.insert({DNNL_ARG_SCRATCHPAD, memory(e.scratch, engine(), scratch_buf.get(e.scratch.get_size()))});
  memory user(e.user_w, engine(), user_w);
  if (!e.reorder_needed) {
    a.insert({w_arg, user});
    e.prim.execute(stream, a);
  } else {
    memory blocked(e.prim_w, engine(), weight_buf.get(e.prim_w.get_size()));
    a.insert({w_arg, blocked});
    if (w_arg == DNNL_ARG_DIFF_WEIGHTS) {
      e.prim.execute(stream, a);
      e.reorder.execute(stream, blocked, user);
    } else {
      e.reorder.execute(stream, user, blocked);
      e.prim.execute(stream, a);
    }
  }
  stream.wait();
  return true;
}

memory mem(const memory::desc& d, const Tensor& t) { return memory(d, engine(), t.data_ptr()); }

}  // namespace

bool onednn_built() { return true; }

bool onednn_preferred_for_backward_filter(const ConvGeom& g) {
  // Backward filter sums over N OH OW output pixels. Where each image has few (ResNet's last stages
  // at 64 px: 2x2 output maps), oneDNN 2.6's NHWC weight-gradient kernel ran 1.1-1.8x slower than
  // the reference's one GEMM with that sum as its inner dimension (bench_ops' bwd_filter rows with
  // 2x2 outputs at batch 32, apps/results/2026-11-28-cpu-2core/); at 4x4 it was mixed (0.83-1.08x),
  // from 8x8 up oneDNN won by 1.1-7x. The rule looks at one image's pixels, not the batch's, so the
  // choice never depends on the batch size: N ranks x batch b then run the same kernels as one
  // process x batch N b, which the DDP equivalence tests (tests/mpi_ddp.cpp) need.
  constexpr int64_t kMaxReferencePixels = 4;  // 2x2 outputs: the reference won on every such row
  return g.oh * g.ow > kMaxReferencePixels;
}

bool conv2d_forward_onednn(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y) {
  if (!usable(g, x)) return false;
  const Entry& e = entry(g, x.dtype(), Dir::Forward);
  if (!e.ok) return false;
  const Descs d = descs(g, x.dtype());
  return run(e, {{DNNL_ARG_SRC, mem(d.x, x)}, {DNNL_ARG_DST, mem(d.y, y)}}, DNNL_ARG_WEIGHTS, w.data_ptr());
}

bool conv2d_backward_data_onednn(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (!usable(g, dy)) return false;
  const Entry& e = entry(g, dy.dtype(), Dir::BackwardData);
  if (!e.ok) return false;
  const Descs d = descs(g, dy.dtype());
  return run(e, {{DNNL_ARG_DIFF_DST, mem(d.y, dy)}, {DNNL_ARG_DIFF_SRC, mem(d.x, dx)}}, DNNL_ARG_WEIGHTS,
             w.data_ptr());
}

bool conv2d_backward_filter_onednn(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw) {
  if (!usable(g, x)) return false;
  const Entry& e = entry(g, x.dtype(), Dir::BackwardFilter);
  if (!e.ok) return false;
  const Descs d = descs(g, x.dtype());
  return run(e, {{DNNL_ARG_SRC, mem(d.x, x)}, {DNNL_ARG_DIFF_DST, mem(d.y, dy)}}, DNNL_ARG_DIFF_WEIGHTS,
             dw.data_ptr());
}

#else  // built without oneDNN: every call is answered with false and the im2col reference runs

bool onednn_built() { return false; }
bool onednn_preferred_for_backward_filter(const ConvGeom&) { return false; }
bool conv2d_forward_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool conv2d_backward_data_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool conv2d_backward_filter_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }

#endif

}  // namespace tandem::kernels
