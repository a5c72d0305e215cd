// core/ops/conv/cpu_onednn.cpp: conv2d forward / backward-data / backward-filter on the CPU through
// oneDNN (Debian's libdnnl 2.6, its v2 API; third_party/README.md says why that package), with each
// problem's primitive cached.
//
// Layouts: activations are NHWC (format_tag nhwc: oneDNN's JIT kernels read and write it as is), except
// where onednn_blocked_activations picks oneDNN's blocked layout (small images, many channels): there
// the primitive gets format any, and the activations are reordered to its layout and back per call.
// The OHWI weight is described with strides (dims [O, C, KH, KW],
// or [G, O/G, C/G, KH, KW] when grouped); the primitive picks its own blocked weight layout
// (format_tag any) and the weight, or its gradient, is reordered per call - a pass over the weight
// only, which is small beside the activations except on the deepest layers (ResNet-18's 512x512x3x3 at
// 2x2: about 2 ms of a 7 ms forward). Reordering once per weight version instead needs a version
// count on tensors (bumped by every in-place write, the optimizer's included), which tandem lacks.
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

// One tensor argument of a primitive: tandem's layout (`user`), the primitive's (`prim`) and the
// reorder between them (user -> primitive for inputs, primitive -> user for outputs; empty when the
// two agree, and then the user's buffer is passed as is).
struct Arg {
  int arg = 0;
  bool input = true;
  memory::desc user, prim;
  bool reorder_needed = false;
  dnnl::reorder reorder;
};

// A cached problem: the primitive (`ok` false: oneDNN refused it), its three tensor arguments in
// the order x-side, weight, y-side, and its scratchpad.
struct Entry {
  bool ok = false;
  dnnl::primitive prim;
  Arg args[3];
  memory::desc scratch;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::data_type dnnl_type(DType t) { return t == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32; }

// The descriptors and geometry all three directions share.
struct Descs {
  memory::desc x, y, x_prim, y_prim, w_any, w_user;
  memory::dims strides, dilates, pad_l, pad_r;
};

Descs descs(const ConvGeom& g, DType dt, bool backward_filter) {
  const auto& p = g.p;
  const auto t = dnnl_type(dt);
  const int64_t grp = p.groups, cg = g.c / grp, og = g.o / grp;
  Descs d;
  d.x = memory::desc({g.n, g.c, g.h, g.w}, t, Tag::nhwc);
  d.y = memory::desc({g.n, g.o, g.oh, g.ow}, t, Tag::nhwc);
  // The activations as the primitive sees them: NHWC as they are, or oneDNN's choice (its blocked
  // nChw16c) where onednn_blocked_activations says the per-call reorders pay.
  const bool blocked = onednn_blocked_activations(g, backward_filter);
  d.x_prim = blocked ? memory::desc({g.n, g.c, g.h, g.w}, t, Tag::any) : d.x;
  d.y_prim = blocked ? memory::desc({g.n, g.o, g.oh, g.ow}, t, Tag::any) : d.y;
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
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                     d.x_prim, d.w_any, d.y_prim, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(fd, user_scratchpad(), engine());
}

Arg make_arg(int arg, bool input, const memory::desc& user, const memory::desc& prim) {
  Arg a;
  a.arg = arg, a.input = input, a.user = user, a.prim = prim;
  a.reorder_needed = prim != user;
  if (a.reorder_needed)
    a.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user));
  return a;
}

Entry build(const ConvGeom& g, DType dt, Dir dir) {
  Entry e;
  const Descs d = descs(g, dt, dir == Dir::BackwardFilter);
  const auto fwd = forward_pd(d);
  if (dir == Dir::Forward) {
    e.prim = dnnl::convolution_forward(fwd);
    e.args[0] = make_arg(DNNL_ARG_SRC, true, d.x, fwd.src_desc());
    e.args[1] = make_arg(DNNL_ARG_WEIGHTS, true, d.w_user, fwd.weights_desc());
    e.args[2] = make_arg(DNNL_ARG_DST, false, d.y, fwd.dst_desc());
    e.scratch = fwd.scratchpad_desc();
  } else if (dir == Dir::BackwardData) {
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, d.x_prim, d.w_any, d.y_prim,
                                             d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(bd, user_scratchpad(), engine(), fwd);
    e.prim = dnnl::convolution_backward_data(pd);
    e.args[0] = make_arg(DNNL_ARG_DIFF_SRC, false, d.x, pd.diff_src_desc());
    e.args[1] = make_arg(DNNL_ARG_WEIGHTS, true, d.w_user, pd.weights_desc());
    e.args[2] = make_arg(DNNL_ARG_DIFF_DST, true, d.y, pd.diff_dst_desc());
    e.scratch = pd.scratchpad_desc();
  } else {
    dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, d.x_prim, d.w_any, d.y_prim,
                                                d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(wd, user_scratchpad(), engine(), fwd);
    e.prim = dnnl::convolution_backward_weights(pd);
    e.args[0] = make_arg(DNNL_ARG_SRC, true, d.x, pd.src_desc());
    e.args[1] = make_arg(DNNL_ARG_DIFF_WEIGHTS, false, d.w_user, pd.diff_weights_desc());
    e.args[2] = make_arg(DNNL_ARG_DIFF_DST, true, d.y, pd.diff_dst_desc());
    e.scratch = pd.scratchpad_desc();
  }
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

// Runs a cached entry on tandem's buffers (x-side, weight, y-side, as in Entry::args): arguments
// whose layout differs from tandem's go through their reorder - inputs before the primitive,
// outputs after - in per-thread buffers.
bool run(const Entry& e, void* const (&user)[3]) {
  thread_local Buffer scratch_buf, arg_buf[3];
  thread_local dnnl::stream stream(engine());
  std::unordered_map<int, memory> a;
  a.insert({DNNL_ARG_SCRATCHPAD, memory(e.scratch, engine(), scratch_buf.get(e.scratch.get_size()))});
  memory user_mem[3], prim_mem[3];
  for (int i = 0; i < 3; ++i) {
    const Arg& arg = e.args[i];
    user_mem[i] = memory(arg.user, engine(), user[i]);
    prim_mem[i] = arg.reorder_needed ? memory(arg.prim, engine(), arg_buf[i].get(arg.prim.get_size())) : user_mem[i];
    if (arg.reorder_needed && arg.input) arg.reorder.execute(stream, user_mem[i], prim_mem[i]);
    a.insert({arg.arg, prim_mem[i]});
  }
  e.prim.execute(stream, a);
  for (int i = 0; i < 3; ++i)
    if (e.args[i].reorder_needed && !e.args[i].input) e.args[i].reorder.execute(stream, prim_mem[i], user_mem[i]);
  stream.wait();
  return true;
}

}  // namespace

bool onednn_built() { return true; }

bool onednn_blocked_activations(const ConvGeom& g, bool backward_filter) {
  // oneDNN 2.6's NHWC kernels (brgconv) lose to its blocked ones (nChw16c, jit) on small images
  // with many channels: bench_ops' rows with >= 256 channels and <= 8x8 outputs ran forward and
  // backward data 1.1-2.9x faster on the blocked layout even with the activations reordered to it
  // and back per call (resnet18 3x3 512->512 @2 fwd 34.0 -> 11.6 ms, vgg16 3x3 512->512 @8 fwd 113
  // -> 90 ms, process CPU time, apps/results/2026-11-28-cpu-2core/bench_ops_blocked.txt), as the
  // activations there are small beside the weights. With fewer channels the reorders' fixed cost
  // lost (resnet_tiny rows, 0.02-0.35 ms), and backward filter was mixed (0.8-1.2x), so those keep
  // NHWC. The rule reads one image's geometry, never the batch (the DDP tests need batch-free
  // kernel choices; see onednn_preferred_for_backward_filter).
  constexpr int64_t kMinChannels = 256;   // the smallest channel count measured to win
  constexpr int64_t kMaxOutPixels = 64;   // 8x8 outputs: the largest measured to win
  return !backward_filter && g.p.groups == 1 && std::min(g.c, g.o) >= kMinChannels && g.oh * g.ow <= kMaxOutPixels;
}

bool onednn_preferred_for_backward_filter(const ConvGeom& g) {
  // Backward filter sums over N OH OW output pixels. Where each image has few (ResNet's last stages
  // at 64 px: 2x2 output maps), oneDNN 2.6's NHWC weight-gradient kernel ran 1.1-1.8x slower than
  // the reference's one GEMM with that sum as its inner dimension (bench_ops' bwd_filter rows with
  // 2x2 outputs at batch 32, apps/results/2026-11-28-cpu-2core/); at 4x4 it was mixed (0.83-1.08x)
  // except with wide 3x3 windows: VGG-16's 3x3 512->512 at 4x4 ran 62.8 ms on oneDNN (79.3 on its
  // blocked layout) against the reference's 28.8 (bench_ops_blocked.txt), so 4x4 outputs whose
  // window holds >= 512 x 3 x 3 inputs run the reference too. From 8x8 up oneDNN won by 1.1-7x. The
  // rule looks at one image's geometry, not the batch's, so the choice never depends on the batch
  // size: N ranks x batch b then run the same kernels as one process x batch N b, which the DDP
  // equivalence tests (tests/mpi_ddp.cpp) need.
  constexpr int64_t kMaxReferencePixels = 4;     // 2x2 outputs: the reference won on every such row
  constexpr int64_t kMaxWidePixels = 16;         // 4x4 outputs ...
  constexpr int64_t kMinWideWindow = 512 * 3 * 3;  // ... with VGG's/ResNet's widest 3x3 window
  const int64_t pixels = g.oh * g.ow, window = (g.c / g.p.groups) * g.kh * g.kw;
  return pixels > kMaxReferencePixels && !(pixels <= kMaxWidePixels && window >= kMinWideWindow);
}

bool conv2d_forward_onednn(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y) {
  if (!usable(g, x)) return false;
  const Entry& e = entry(g, x.dtype(), Dir::Forward);
  return e.ok && run(e, {x.data_ptr(), w.data_ptr(), y.data_ptr()});
}

bool conv2d_backward_data_onednn(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (!usable(g, dy)) return false;
  const Entry& e = entry(g, dy.dtype(), Dir::BackwardData);
  return e.ok && run(e, {dx.data_ptr(), w.data_ptr(), dy.data_ptr()});
}

bool conv2d_backward_filter_onednn(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw) {
  if (!usable(g, x)) return false;
  const Entry& e = entry(g, x.dtype(), Dir::BackwardFilter);
  return e.ok && run(e, {x.data_ptr(), dw.data_ptr(), dy.data_ptr()});
}

#else  // built without oneDNN: every call is answered with false and the im2col reference runs

bool onednn_built() { return false; }
bool onednn_preferred_for_backward_filter(const ConvGeom&) { return false; }
bool onednn_blocked_activations(const ConvGeom&, bool) { return false; }
bool conv2d_forward_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool conv2d_backward_data_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }
bool conv2d_backward_filter_onednn(const ConvGeom&, const Tensor&, const Tensor&, Tensor&) { return false; }

#endif

}  // namespace tandem::kernels
