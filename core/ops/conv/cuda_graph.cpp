// core/ops/conv/cuda_graph.cpp: conv2d_bias_relu's forward as ONE cuDNN frontend graph (CUDA builds):
//   X [n, c, h, w] (NHWC strides), W [o, c, kh, kw] (OHWI strides)
//   -> conv_fprop (f32 accumulation, virtual f32 output)
//   -> pointwise ADD with B [1, o, 1, 1] (the bias, broadcast per channel; skipped without a bias)
//   -> pointwise RELU_FWD (lower clip 0) -> Y [n, o, oh, ow] in x's dtype, written once.
// This is the only file of conv/ that includes <cudnn_frontend.h> (about 40 s to compile): the
// header stays out of everything else. Built without the frontend (TANDEM_HAVE_CUDNN_FRONTEND 0)
// the entry point returns false and conv.cpp runs the conv and its bias+ReLU pass instead.
//
// Engines: the frontend's heuristics (mode A, then FALLBACK) under the same filters as the plain
// conv plans (core/ops/conv/cuda.cpp, core/backend.h): f32 data without TF32 deselects engines with
// the TENSOR_CORE / DOWN_CONVERT_INPUTS notes, deterministic deselects NONDETERMINISTIC ones, and
// plans above conv_workspace_limit are deselected. A problem no engine takes is remembered as
// refused (a null graph in the cache), counted by ops::conv_bias_relu_stats, noted once on stderr.
// Caching: one built graph per (device, dtype, filters, shapes, params, bias or not); building
// compiles runtime-fusion kernels (NVRTC, tens of ms: init time, once per layer shape).
// Alignment: the frontend describes every tensor as 16-byte aligned, so a call whose pointers are
// not (a view at an odd offset) takes the other path rather than a wrong plan; tandem's allocator
// hands out 256-byte aligned blocks, so whole activations and parameters always qualify.
// Groups: only groups == 1 (VGG, AlexNet); grouped convs take the other path.
// Never run on a GPU yet (written in a session without one): tests/gpu_conv_fusion.cpp pins it.
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/backend.h"
#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/common/cuda/dnn_handle.h"
#include "core/ops/conv/kernels.h"
#include "core/storage.h"

#if defined(TANDEM_HAVE_CUDNN_FRONTEND) && TANDEM_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#define TANDEM_CONV_GRAPH 1
#else
#define TANDEM_CONV_GRAPH 0
#endif

namespace tandem::kernels {

#if TANDEM_CONV_GRAPH
namespace {
namespace fe = cudnn_frontend;

// Tensor uids of the variant pack.
enum Uid : int64_t { kX = 1, kW = 2, kB = 3, kY = 4 };

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused for this problem
  int64_t workspace = 0;
};
using Key = std::array<int64_t, 22>;
// Leaked on purpose, as conv/cuda.cpp's plan cache: destroying plans after the CUDA runtime's own
// teardown is reported to crash cuDNN 9.10+ (pytorch/pytorch#169153).
std::map<Key, Entry>& cache() {
  static auto* m = new std::map<Key, Entry>;
  return *m;
}
std::mutex g_mutex;

fe::DataType_t fe_type(DType t) {
  switch (t) {
    case DType::F32: return fe::DataType_t::FLOAT;
    case DType::F16: return fe::DataType_t::HALF;
    case DType::BF16: return fe::DataType_t::BFLOAT16;
    default: TANDEM_THROW("CUDA conv2d_bias_relu takes f32, f16 or bf16, got ", dtype_name(t), ": cast first");
  }
}

// A 4-D NHWC tensor [n, h, w, c] as the frontend's (n, c, h, w) dims with NHWC strides.
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t h, int64_t w, int64_t c) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({n, c, h, w})
      .set_stride({h * w * c, 1, w * c, c});
}

// One stderr line for the first refused problem; later ones are only counted.
void note_refused(const ConvGeom& g, DType dt, const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr,
               "tandem: cuDNN conv + bias + ReLU graph not available for %s x [%lld, %lld, %lld, %lld] with %lld "
               "%lldx%lld filters (%s): conv, then one bias+ReLU pass (noted once)\n",
               dtype_name(dt), static_cast<long long>(g.n), static_cast<long long>(g.h), static_cast<long long>(g.w),
               static_cast<long long>(g.c), static_cast<long long>(g.o), static_cast<long long>(g.kh),
               static_cast<long long>(g.kw), why.c_str());
}

// Builds the graph, or returns a null graph with the reason in `why`.
Entry build(const ConvGeom& g, DType dt, bool has_bias, const BackendConfig& be, std::string& why) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe_type(dt))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto X = graph->tensor(nhwc("x", kX, g.n, g.h, g.w, g.c));
  auto W = graph->tensor(nhwc("w", kW, g.o, g.kh, g.kw, g.c));  // OHWI is NHWC-shaped
  auto conv = graph->conv_fprop(X, W,
                                fe::graph::Conv_fprop_attributes()
                                    .set_name("conv")
                                    .set_pre_padding({g.p.pad_h, g.p.pad_w})
                                    .set_post_padding({g.p.pad_h, g.p.pad_w})
                                    .set_stride({g.p.stride_h, g.p.stride_w})
                                    .set_dilation({g.p.dilation_h, g.p.dilation_w}));
  conv->set_data_type(fe::DataType_t::FLOAT);  // virtual: f32 until the one rounding at Y
  auto pre = conv;
  if (has_bias) {
    auto B = graph->tensor(nhwc("b", kB, 1, 1, 1, g.o));
    pre = graph->pointwise(conv, B, fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
    pre->set_data_type(fe::DataType_t::FLOAT);
  }
  auto Y = graph->pointwise(pre, fe::graph::Pointwise_attributes()
                                     .set_name("relu")
                                     .set_mode(fe::PointwiseMode_t::RELU_FWD)
                                     .set_relu_lower_clip(0.f));
  const int64_t o = g.o, oh = g.oh, ow = g.ow;
  Y->set_uid(kY).set_dim({g.n, o, oh, ow}).set_stride({oh * ow * o, 1, ow * o, o}).set_data_type(fe_type(dt));
  Y->set_output(true);

  cudnnHandle_t handle = cuda::dnn_handle();
  auto fail = [&](fe::error_t e) {
    why = e.get_message();
    return Entry{};
  };
  if (auto e = graph->validate(); e.is_bad()) return fail(e);
  if (auto e = graph->build_operation_graph(handle); e.is_bad()) return fail(e);
  if (auto e = graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad()) return fail(e);
  if (dt == DType::F32 && !be.allow_tf32)
    graph->deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
  if (be.deterministic) graph->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  graph->deselect_workspace_greater_than(be.conv_workspace_limit);
  if (auto e = graph->check_support(); e.is_bad()) return fail(e);
  if (auto e = graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad()) return fail(e);
  Entry out;
  if (auto e = graph->get_workspace_size(out.workspace); e.is_bad()) return fail(e);
  out.graph = graph;
  return out;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace
#endif  // TANDEM_CONV_GRAPH

bool conv_graphs_built() { return TANDEM_CONV_GRAPH != 0; }

bool conv2d_forward_bias_relu_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                         Tensor& y) {
#if !TANDEM_CONV_GRAPH
  (void)g, (void)x, (void)w, (void)b, (void)y;
  return false;
#else
  if (g.n == 0) return true;  // nothing to write
  const bool has_bias = b.defined();
  if (g.p.groups != 1 || !aligned16(x.data_ptr()) || !aligned16(w.data_ptr()) || !aligned16(y.data_ptr()) ||
      (has_bias && !aligned16(b.data_ptr())))
    return false;
  const DType dt = x.dtype();
  const BackendConfig be = backend();
  const bool f32_strict = dt == DType::F32 && !be.allow_tf32;
  const int device = cuda::current_device();
  const Key key{device, static_cast<int64_t>(dt), f32_strict, be.deterministic, be.conv_workspace_limit, has_bias,
                g.n, g.h, g.w, g.c, g.o, g.kh, g.kw, g.oh, g.ow,
                g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dilation_h, g.p.dilation_w, g.p.groups};

  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = cache().find(key);
  if (it == cache().end()) {
    std::string why;
    Entry e;
    try {  // an attribute this cuDNN rejects means no fused graph, not a failed op
      e = build(g, dt, has_bias, be, why);
    } catch (const std::exception& ex) {
      e = Entry{};
      why = ex.what();
    }
    if (!e.graph) note_refused(g, dt, why.empty() ? "no engine takes the graph" : why);
    it = cache().emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  if (!e.graph) return false;

  Storage workspace(static_cast<size_t>(e.workspace), Device::cuda(device));
  std::unordered_map<int64_t, void*> pack{{kX, x.data_ptr()}, {kW, w.data_ptr()}, {kY, y.data_ptr()}};
  if (has_bias) pack.emplace(kB, b.data_ptr());
  fe::error_t st = e.graph->execute(cuda::dnn_handle(), pack, workspace.data());
  if (st.is_bad()) {  // e.g. a runtime-compiled kernel that cannot launch: never again for this problem
    (void)cudaGetLastError();  // do not let the next launch check report cuDNN's failure as its own
    note_refused(g, dt, st.get_message());
    e = Entry{};
    return false;
  }
  return true;
#endif
}

}  // namespace tandem::kernels
