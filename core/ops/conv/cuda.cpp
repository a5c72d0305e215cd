// core/ops/conv/cuda.cpp: conv2d forward / backward-data / backward-filter through cuDNN's graph
// (backend) API, with the finalized execution plan cached per problem.
//
// Why the backend API: cuDNN 9 marks the legacy cudnnConvolutionForward family CUDNN_DEPRECATED
// (cudnn_cnn.h). Each problem becomes a one-node operation graph:
//   tensor descriptors (uid 1 = x-shaped, 2 = w-shaped, 3 = y-shaped) -> convolution descriptor
//   -> CONVOLUTION_{FORWARD, BACKWARD_DATA, BACKWARD_FILTER} operation -> operation graph
//   -> engine heuristics (mode A, then FALLBACK) -> the first engine config whose execution plan
//   finalizes -> plan, executed with a variant pack (uid -> device pointer, workspace).
// The same three uids serve all three ops: forward reads 1, 2 and writes 3; backward data reads 2, 3
// and writes 1; backward filter reads 1, 3 and writes 2.
// Forward with bias (conv2d_forward_bias_cuda) is a two-node graph: the convolution writes a virtual
// f32 tensor (uid 4, never in memory) and a pointwise ADD with the bias (uid 5, [1, O, 1, 1]
// broadcast over N, H, W) writes y (uid 3), so the bias costs no extra pass over y. Only cuDNN's
// runtime-fusion engines take such graphs (compiled with NVRTC when the plan is built) and not for
// every shape and dtype: a problem without a fused engine is remembered and runs the plain forward,
// and the caller adds the bias (core/ops/conv/conv.cpp).
// Backward data that accumulates (conv2d_backward_data_accumulate_cuda, autograd's pending gradient:
// dx += dgrad) is the backward-data node with beta = 1 instead of 0: cuDNN blends the existing dx
// in the epilogue, in f32 before the one rounding. A problem for which no engine finalizes such a
// plan is remembered and answered with false; the caller computes dx fresh and adds it.
//
// Layout: cuDNN dimensions are always in N, C, H, W order; NHWC is said with strides
// ([H W C, 1, W C, C]) and the OHWI filter likewise ([KH KW Cg, 1, KW Cg, Cg]). Groups are implied
// by the filter's channel count (C / groups), as the graph API expects.
// Precision: compute type f32 for every data type. For f32 data, engines that use TF32 tensor cores
// (numerical notes TENSOR_CORE / DOWN_CONVERT_INPUTS) are skipped when BackendConfig::allow_tf32 is off.
// Engine filters (core/backend.h): BackendConfig::deterministic skips engines with the
// NONDETERMINISTIC note, and plans whose workspace exceeds conv_workspace_limit are skipped.
// Caching: building a plan runs the heuristics and may compile kernels (milliseconds), so one plan
// per (device, dtype, op, TF32 switch, determinism, workspace limit, shapes, params, pointer
// alignments) is built once and kept.
// The graph and the plan take the cuDNN handle through the *_HANDLE attributes, which cuDNN 9.19
// marks deprecated in favour of device-property descriptors; we keep them because the GPU machines
// may run any cuDNN 9.x (pip wheels lag the toolkit) and older 9.x have no device-property path.
// Workspaces come from the stream-ordered allocator per call: freeing right after the enqueue is
// safe because the free is ordered on the same compute stream.
#include <cudnn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/common/cuda/dnn_handle.h"
#include "core/ops/conv/conv.h"
#include "core/ops/conv/kernels.h"
#include "core/ops/matmul/matmul.h"
#include "core/storage.h"

namespace tandem::kernels {
namespace {

enum class ConvOp : int64_t { Forward, BackwardData, BackwardFilter, ForwardBias, BackwardDataAccumulate };

// What differs between the three operations is only which descriptor type and attribute names
// they use; the roles (x-shaped, w-shaped, y-shaped tensor, conv descriptor, alpha, beta) are the
// same. Indexed by ConvOp (ForwardBias uses Forward's, BackwardDataAccumulate BackwardData's).
struct OpAttrs {
  const char* name;  // for error messages
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
const OpAttrs kOpAttrs[] = {
    {"forward", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {"backward data", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {"backward filter", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

// Owns one backend descriptor.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d)); }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};
using DescPtr = std::shared_ptr<Desc>;

void set(const DescPtr& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
         const void* values) {
  CUDNN_CHECK(cudnnBackendSetAttribute(d->d, name, type, count, values));
}
void set_desc(const DescPtr& d, cudnnBackendAttributeName_t name, const DescPtr& value) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value->d);
}

struct Plan {
  std::vector<DescPtr> keep;  // tensors, conv, op and graph: alive as long as the plan refers to them
  DescPtr plan;  // null: no engine takes the fused conv + bias graph for this problem
  int64_t workspace = 0;
};

using Key = std::array<int64_t, 24>;
// One entry per distinct conv problem of the model. Leaked on purpose, like the handles: a static
// map would destroy its execution plans after the CUDA runtime's own atexit teardown, and cuDNN
// 9.10+ is reported to segfault there (pytorch/pytorch#169153 leaks its plan cache for this).
std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;
  return *m;
}
std::mutex g_mutex;

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: TANDEM_THROW("CUDA conv2d takes f32, f16 or bf16, got ", dtype_name(t), ": cast the tensors first");
  }
}

int64_t alignment(const void* p) {  // largest power of two <= 16 dividing the address
  auto u = reinterpret_cast<uintptr_t>(p);
  int64_t a = 16;
  while (a > 1 && u % a != 0) a /= 2;
  return a;
}

// A 4-D NHWC tensor [n, h, w, c] described to cuDNN as dims (n, c, h, w) with NHWC strides.
// Virtual: an intermediate of a fused graph, never in memory. A [1, 1, 1, c] tensor (the bias)
// broadcasts over the others' n, h and w.
DescPtr tensor(int64_t uid, cudnnDataType_t t, int64_t n, int64_t h, int64_t w, int64_t c, int64_t align,
               bool is_virtual = false) {
  auto d = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {h * w * c, 1, w * c, c};
  if (is_virtual) set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  CUDNN_CHECK(cudnnBackendFinalize(d->d));
  return d;
}

// What an engine must satisfy besides supporting the problem.
struct EngineFilter {
  bool f32_strict;        // f32 data without TF32: no tensor-core / down-converting engines
  bool deterministic;     // no engine with the NONDETERMINISTIC note
  int64_t max_workspace;  // bytes
};

// True when this engine config may be used under the filter's numerical settings.
bool allowed(const DescPtr& cfg, const EngineFilter& f) {
  if (!f.f32_strict && !f.deterministic) return true;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(cfg->d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                       &engine.d));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  CUDNN_CHECK(cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       static_cast<int64_t>(notes.size()), &n, notes.data()));
  for (int64_t i = 0; i < n; ++i) {
    if (f.f32_strict &&
        (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      return false;
    if (f.deterministic && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  return true;
}

// Runs the heuristics in `mode` and returns the first engine config that finalizes into a plan.
bool pick_plan(cudnnHandle_t handle, const DescPtr& graph, cudnnBackendHeurMode_t mode, const EngineFilter& filter,
               Plan& out) {
  auto heur = std::make_shared<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur->d) != CUDNN_STATUS_SUCCESS) return false;
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr));
  if (count <= 0) return false;
  std::vector<DescPtr> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->d);
  }
  CUDNN_CHECK(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                       &count, raw.data()));
  for (int64_t i = 0; i < count; ++i) {
    if (!allowed(cfgs[i], filter)) continue;
    auto plan = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
    // A config the heuristic ranks can still be unsupported for this exact problem: try the next.
    if (cudnnBackendFinalize(plan->d) != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0, workspace = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                         &workspace));
    if (workspace > filter.max_workspace) continue;  // the heuristics' next choice usually needs less
    out.workspace = workspace;
    out.keep.push_back(cfgs[i]);
    out.plan = plan;
    return true;
  }
  return false;
}

// Builds the plan; for ForwardBias and BackwardDataAccumulate, a plan whose `plan` is null when no
// engine takes the graph.
Plan build(const ConvGeom& g, ConvOp op, DType dt, const EngineFilter& filter, const int64_t align[4]) {
  cudnnHandle_t handle = cuda::dnn_handle();
  cudnnDataType_t t = dnn_type(dt);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // f32 accumulation for every dtype
  const bool fused = op == ConvOp::ForwardBias, accumulate = op == ConvOp::BackwardDataAccumulate;
  const int64_t cg = g.c / g.p.groups;
  DescPtr x = tensor(1, t, g.n, g.h, g.w, g.c, align[0]);
  DescPtr w = tensor(2, t, g.o, g.kh, g.kw, cg, align[1]);  // OHWI is NHWC-shaped: (O, KH, KW, Cg)
  DescPtr y = tensor(3, t, g.n, g.oh, g.ow, g.o, align[2]);
  DescPtr conv_y = fused ? tensor(4, compute, g.n, g.oh, g.ow, g.o, 16, true) : y;

  auto conv = std::make_shared<Desc>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  const int64_t dil[2] = {g.p.dilation_h, g.p.dilation_w}, str[2] = {g.p.stride_h, g.p.stride_w},
                pad[2] = {g.p.pad_h, g.p.pad_w};
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  CUDNN_CHECK(cudnnBackendFinalize(conv->d));

  // Outputs are overwritten (beta = 0), except where dx accumulates (beta = 1: dx = dgrad + dx).
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const ConvOp base = fused ? ConvOp::Forward : accumulate ? ConvOp::BackwardData : op;
  const OpAttrs& a = kOpAttrs[static_cast<int>(base)];
  auto node = std::make_shared<Desc>(a.type);
  set_desc(node, a.x, x);
  set_desc(node, a.w, w);
  set_desc(node, a.y, conv_y);
  set_desc(node, a.conv, conv);
  set(node, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(node, a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  CUDNN_CHECK(cudnnBackendFinalize(node->d));

  Plan p;
  p.keep = {x, w, y, conv, node};
  std::vector<cudnnBackendDescriptor_t> nodes{node->d};
  if (fused) {  // y = conv_y + bias, in f32 before the one rounding to y's dtype
    DescPtr bias = tensor(5, t, 1, 1, 1, g.o, align[3]);
    auto add = std::make_shared<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnPointwiseMode_t pw_mode = CUDNN_POINTWISE_ADD;
    set(add, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pw_mode);
    set(add, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    CUDNN_CHECK(cudnnBackendFinalize(add->d));
    auto add_node = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(add_node, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, add);
    set_desc(add_node, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, conv_y);
    set_desc(add_node, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bias);
    set_desc(add_node, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    CUDNN_CHECK(cudnnBackendFinalize(add_node->d));
    p.keep.insert(p.keep.end(), {conv_y, bias, add, add_node});
    nodes.push_back(add_node->d);
  }

  auto graph = std::make_shared<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(nodes.size()),
      nodes.data());
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  // A fused graph cuDNN cannot take may already fail here (NOT_SUPPORTED): no fused plan.
  if (fused && cudnnBackendFinalize(graph->d) != CUDNN_STATUS_SUCCESS) return Plan{};
  if (!fused) CUDNN_CHECK(cudnnBackendFinalize(graph->d));
  p.keep.push_back(graph);

  bool ok = pick_plan(handle, graph, CUDNN_HEUR_MODE_A, filter, p) ||
            pick_plan(handle, graph, CUDNN_HEUR_MODE_FALLBACK, filter, p);
  if ((fused || accumulate) && !ok) return Plan{};
  TANDEM_CHECK(ok, "cuDNN has no engine for conv2d ", a.name, " (", dtype_name(dt), ", x [",
               g.n, ", ", g.h, ", ", g.w, ", ", g.c, "], w [", g.o, ", ", g.kh, ", ", g.kw, ", ", cg, "], groups ",
               g.p.groups, filter.f32_strict ? ", TF32 disabled" : "", filter.deterministic ? ", deterministic" : "",
               ", workspace <= ", filter.max_workspace, " bytes): try another dtype, or turn on BackendConfig::allow_tf32, ",
               "turn off BackendConfig::deterministic or raise BackendConfig::conv_workspace_limit (core/backend.h)");
  return p;
}

// One stderr line the first time (per `said`) a problem gets no plan for `what`: the run still computes
// the same values `instead`, slower; later ones are only counted (ops::conv_bias_fusion_stats,
// conv_dgrad_accumulate_stats). The graphs of cuda_graph.cpp say theirs through note_conv_fallback.
void note_once(std::atomic<bool>& said, const char* what, const ConvGeom& g, DType dt, const char* why,
               const char* instead) {
  if (!said.exchange(true)) note_conv_fallback(g, dt, what, instead, why);
}
void note_no_fusion(const ConvGeom& g, DType dt, const char* why) {
  static std::atomic<bool> said{false};
  note_once(said, "fused conv + bias", g, dt, why, "plain conv + bias add");
}
void note_no_accumulate(const ConvGeom& g, DType dt) {
  static std::atomic<bool> said{false};
  note_once(said, "backward data with beta = 1", g, dt, "no engine takes it", "dx computed fresh and added");
}

// Runs op on the compute stream. bias: ForwardBias only. Returns false only for ForwardBias without a
// working fused plan (y is then garbage or untouched: the caller's plain forward overwrites it) and
// for BackwardDataAccumulate without a plan (nothing written); every other failure throws, an
// accumulating run that fails to execute too (dx may be half-written: no recovery from that).
bool run(ConvOp op, const ConvGeom& g, const Tensor& xs, const Tensor& ws, const Tensor& ys,
         const Tensor& bias = Tensor()) {
  if (g.n == 0) return true;  // nothing to compute, and an empty y has no bias to add
  const bool fused = op == ConvOp::ForwardBias, optional = fused || op == ConvOp::BackwardDataAccumulate;
  const DType dt = xs.dtype();
  const BackendConfig be = backend();
  const EngineFilter filter{dt == DType::F32 && !be.allow_tf32, be.deterministic, be.conv_workspace_limit};
  void* ptrs[4] = {xs.data_ptr(), ws.data_ptr(), ys.data_ptr(), fused ? bias.data_ptr() : nullptr};
  const int64_t align[4] = {alignment(ptrs[0]), alignment(ptrs[1]), alignment(ptrs[2]), fused ? alignment(ptrs[3]) : 0};
  const int device = cuda::current_device();
  Key key{device, static_cast<int64_t>(dt), static_cast<int64_t>(op), filter.f32_strict, filter.deterministic,
          filter.max_workspace, g.n, g.h, g.w, g.c, g.o, g.kh, g.kw,
          g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dilation_h, g.p.dilation_w, g.p.groups,
          align[0], align[1], align[2], align[3]};

  std::lock_guard<std::mutex> lock(g_mutex);  // plans are shared; execution is a cheap enqueue
  auto it = plans().find(key);
  if (it == plans().end()) {
    Plan built;
    if (!optional) {
      built = build(g, op, dt, filter, align);
    } else if (!fused) {  // accumulate: an engine-less problem is answered with false, the caller adds
      try {
        built = build(g, op, dt, filter, align);
      } catch (const Error&) {
        built = Plan{};
      }
      if (!built.plan) note_no_accumulate(g, dt);
    } else {
      try {  // an attribute this cuDNN rejects means no fused plan, not a failed conv
        built = build(g, op, dt, filter, align);
      } catch (const Error& e) {
        built = Plan{};
        note_no_fusion(g, dt, e.what());
      }
      if (!built.plan) note_no_fusion(g, dt, "no engine takes the conv + bias graph");
    }
    it = plans().emplace(key, std::move(built)).first;
  }
  Plan& p = it->second;
  if (!p.plan) return false;

  Storage workspace(static_cast<size_t>(p.workspace), Device::cuda(device));
  void* ws_ptr = workspace.data();
  const int64_t uids[4] = {1, 2, 3, 5};
  const int64_t n_ptrs = fused ? 4 : 3;
  auto pack = std::make_shared<Desc>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n_ptrs, uids);
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n_ptrs, ptrs);
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
  CUDNN_CHECK(cudnnBackendFinalize(pack->d));
  const cudnnStatus_t st = cudnnBackendExecute(cuda::dnn_handle(), p.plan->d, pack->d);
  if (fused && st != CUDNN_STATUS_SUCCESS) {  // e.g. a runtime-compiled kernel that cannot launch
    p = Plan{};  // never again for this problem: the plain forward and the broadcast add run
    // A launch failure inside cuDNN may be left as the runtime's last error, which the next kernel
    // launch's check would then report as its own; a sticky fault stays visible regardless.
    (void)cudaGetLastError();
    note_no_fusion(g, dt, cudnnGetErrorString(st));
    return false;
  }
  CUDNN_CHECK(st, "conv2d on x [", g.n, ", ", g.h, ", ", g.w, ", ", g.c, "] with ", g.o, " filters ", g.kh, "x",
              g.kw);
  return true;
}

}  // namespace

void note_conv_fallback(const ConvGeom& g, DType dt, const char* graph, const char* instead, const char* why) {
  std::fprintf(stderr,
               "tandem: cuDNN %s not available for %s x [%lld, %lld, %lld, %lld] with %lld %lldx%lld filters (%s): "
               "%s instead (noted once)\n",
               graph, dtype_name(dt), static_cast<long long>(g.n), static_cast<long long>(g.h),
               static_cast<long long>(g.w), static_cast<long long>(g.c), static_cast<long long>(g.o),
               static_cast<long long>(g.kh), static_cast<long long>(g.kw), why, instead);
}

void conv2d_forward_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y) {
  run(ConvOp::Forward, g, x, w, y);
}
bool conv2d_forward_bias_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  return run(ConvOp::ForwardBias, g, x, w, y, b);
}
void conv2d_backward_data_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  run(ConvOp::BackwardData, g, dx, w, dy);
}
bool conv2d_backward_data_accumulate_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  return run(ConvOp::BackwardDataAccumulate, g, dx, w, dy);
}
void conv2d_backward_filter_cuda(const ConvGeom& g, const Tensor& x, const Tensor& dy, Tensor& dw) {
  run(ConvOp::BackwardFilter, g, x, dw, dy);
}

}  // namespace tandem::kernels
