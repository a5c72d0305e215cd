// core/ops/conv/cuda_graph.cpp: the conv family's cuDNN frontend graphs (CUDA builds):
// (1) conv2d_bias_relu's forward as ONE graph:
//   X [n, c, h, w] (NHWC strides), W [o, c, kh, kw] (OHWI strides)
//   -> conv_fprop (f32 accumulation, virtual f32 output)
//   -> pointwise ADD with B [1, o, 1, 1] (the bias, broadcast per channel; skipped without a bias)
//   -> pointwise RELU_FWD (lower clip 0) -> Y [n, o, oh, ow] in x's dtype, written once.
// (2) conv2d_genstats (core/ops/conv_bn/conv_bn.h): conv_fprop -> Y (written), and genstats(Y) ->
//     per-channel SUM and SQ_SUM (f32 [1, o, 1, 1]) from the same kernel's epilogue; and
//     conv2d_bn_relu_genstats, the same graph with the previous BN's prologue in front of the conv:
//     X -> MUL SCALE -> ADD BIAS -> RELU_FWD (SCALE, BIAS [1, c, 1, 1] in the I/O dtype, virtual f32 results)
//     -> conv_fprop, NVIDIA's scale-bias-relu-conv-genstats, so relu(bn(X)) is never written.
// (4) that prologue's backward: conv_wgrad(DY, relu(X * SCALE + BIAS)) -> DW (the prologue in front
//     of the wgrad), and conv_dgrad(DY, W) -> RELU_BWD against the recomputed pre-activation
//     X * SCALE + BIAS -> DZ (the ReLU-masked gradient at the BN's affine output, in the io dtype),
//     so the backward reads X twice and never makes relu(bn(X)). For 16-bit data, first the same
//     dgrad + RELU_BWD graph in BN's form followed by dbn_weight (MLPerf's dgrad_drelu_bnbwd_weight):
//     the BN weight and bias gradients and the coefficients of dx = EQ_SCALE_DY dz + EQ_SCALE_X x +
//     EQ_BIAS from the dgrad's epilogue.
// (3) bn_finalize: the frontend's bn_finalize node, from SUM, SQ_SUM, the BN weight and bias and the
//     running stats (f32 [1, c, 1, 1]; eps, momentum and the count as graph constants) to the
//     equivalent scale and bias, mean, inverse std and the next running stats.
// With core/ops/attention/cuda_cudnn_sdpa.cpp, one of the two files of core/ that include the frontend
// (through core/ops/common/cuda/cudnn_graph.h; about 40 s to compile): the header stays out of everything else. Built without the frontend (TANDEM_HAVE_CUDNN_FRONTEND 0)
// every entry point returns false and the callers take their other paths.
//
// Engines: the frontend's heuristics (mode A, then FALLBACK) under the same filters as the plain
// conv plans (core/ops/conv/cuda.cpp, core/backend.h): f32 data without TF32 deselects engines with
// the TENSOR_CORE / DOWN_CONVERT_INPUTS notes, deterministic deselects NONDETERMINISTIC ones, and
// plans above conv_workspace_limit are deselected. A problem no engine takes is remembered as
// refused (a null graph in the cache), counted by the op's stats (conv_bias_relu_stats,
// conv_bn_fusion_stats), and noted once per graph kind on stderr.
// Caching: one built graph per (graph kind, device, dtype, filters, shapes, params, constants); building
// compiles runtime-fusion kernels (NVRTC, tens of ms: init time, once per layer shape).
// Alignment: the frontend describes every tensor as 16-byte aligned, so a call whose pointers are
// not (a view at an odd offset) takes the other path rather than a wrong plan; tandem's allocator
// hands out 256-byte aligned blocks, so whole activations and parameters always qualify.
// Groups: only groups == 1 (VGG, AlexNet, ResNet); grouped convs take the other path.
// The graphs are described by cudnn_builders:: functions (core/ops/common/cuda/cudnn_graph_builders.h)
// from shapes and dtype alone; tests/cpu_cudnn_graphs.cpp validates each of them, and asks cuDNN
// whether an engine takes it on an H100, on a machine without a GPU (CI). Never run on a GPU yet
// (written in a session without one): tests/gpu_conv_fusion.cpp pins them.
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/common/cuda/cudnn_graph.h"
#include "core/ops/common/cuda/cudnn_graph_builders.h"
#include "core/ops/common/cuda/dnn_handle.h"
#include "core/ops/conv/kernels.h"
#include "core/ops/copy/copy.h"
#include "core/storage.h"

namespace tandem::kernels {

#if TANDEM_CUDNN_GRAPHS
namespace {
using namespace cudnn_graph;  // fe, TensorPtr, VariantPack, fe_type, new_graph, execute

// Tensor uids of the variant packs (one numbering for all three graphs).
enum Uid : int64_t {
  kX = 1, kW, kB, kY, kSum, kSqSum,                          // conv graphs
  kWeight, kBias, kRunMean, kRunVar,                           // bn_finalize inputs (and kSum, kSqSum)
  kEqScale, kEqBias, kMean, kInvStd, kNextMean, kNextVar,      // bn_finalize outputs
  kPrologueScale, kPrologueBias,                               // the BN + ReLU prologue (forward and backward)
  kDy, kDw, kDz,                                               // the prologue's backward graphs
  kDweight, kDbias, kEqScaleDy, kEqScaleX, kEqShift,           // dbn_weight's outputs (and kMean, kInvStd,
};                                                             // kWeight, kBias as its inputs)
enum class Kind : int64_t { BiasRelu, Genstats, BnFinalize, BnReluGenstats, BnReluWgrad, BnReluDgradDrelu,
                            BnReluDgradDreluDbn };

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused for this problem
  int64_t workspace = 0;
};
using Key = std::vector<int64_t>;
// Built graphs, leaked on purpose as conv/cuda.cpp's plan cache is: destroying plans after the CUDA
// runtime's own teardown is reported to crash cuDNN 9.10+ (pytorch/pytorch#169153).
auto* const g_cache = new std::map<Key, Entry>;
std::mutex g_mutex;

// A 4-D NHWC tensor [n, h, w, c] as the frontend's (n, c, h, w) dims with NHWC strides.
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t h, int64_t w, int64_t c) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({n, c, h, w})
      .set_stride({h * w * c, 1, w * c, c});
}
// Marks a node's output as written to memory under `uid`, as a per-channel [1, c, 1, 1] f32 tensor.
void per_channel_output(const TensorPtr& t, int64_t uid, int64_t c) {
  t->set_uid(uid).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(fe::DataType_t::FLOAT);
  t->set_output(true);
}

// A per-channel [1, c, 1, 1] input under `uid`, f32 unless `dt` says otherwise.
TensorPtr per_channel_input(fe::graph::Graph& graph, const char* name, int64_t uid, int64_t c,
                            fe::DataType_t dt = fe::DataType_t::FLOAT) {
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(
          dt));
}

// X * SCALE + BIAS, then RELU_FWD when `relu` (virtual f32 results): the previous BN's output (or,
// without the ReLU, its pre-activation) from its input X. SCALE and BIAS [1, c, 1, 1] in the I/O
// dtype `io`, as NVIDIA's scale-bias-ReLU-conv samples describe them: cuDNN 9.19's engines for the
// prologue graphs refuse f32 ones (its log: "matcher->getScaleDesc()->getDataType() !=
// CUDNN_DATA_HALF", "pointwise_node->numInPorts >= 2 && inputDataTypeX == CUDNN_DATA_FLOAT"), and take
// f16 ones (tests/cpu_cudnn_graphs.cpp's deviceless support check, H100).
TensorPtr add_bn_prologue(fe::graph::Graph& graph, TensorPtr X, int64_t c, bool relu, DType io) {
  auto pointwise = [&](TensorPtr a, TensorPtr b, const char* name, fe::PointwiseMode_t mode) {
    auto attrs = fe::graph::Pointwise_attributes().set_name(name).set_mode(mode);
    TensorPtr t = b ? graph.pointwise(a, b, attrs) : graph.pointwise(a, attrs.set_relu_lower_clip(0.f));
    t->set_data_type(fe::DataType_t::FLOAT);
    return t;
  };
  X = pointwise(X, per_channel_input(graph, "scale", kPrologueScale, c, fe_type(io)), "scale", fe::PointwiseMode_t::MUL);
  X = pointwise(X, per_channel_input(graph, "bias", kPrologueBias, c, fe_type(io)), "bias", fe::PointwiseMode_t::ADD);
  return relu ? pointwise(X, nullptr, "relu", fe::PointwiseMode_t::RELU_FWD) : X;
}

// X as the graph's input, [n, h, w, c].
TensorPtr input_x(fe::graph::Graph& graph, const ConvGeom& g) {
  return graph.tensor(nhwc("x", kX, g.n, g.h, g.w, g.c));
}

// Sets a conv-family attribute set's padding, stride and dilation from the problem.
template <class Attrs>
Attrs conv_attrs(Attrs a, const char* name, const ConvGeom& g) {
  return a.set_name(name)
      .set_pre_padding({g.p.pad_h, g.p.pad_w})
      .set_post_padding({g.p.pad_h, g.p.pad_w})
      .set_stride({g.p.stride_h, g.p.stride_w})
      .set_dilation({g.p.dilation_h, g.p.dilation_w});
}

// X, W -> conv_fprop with the problem's padding, stride and dilation; the output is virtual f32.
// With `prologue`, the conv reads relu(X * SCALE + BIAS) (add_bn_prologue), which cuDNN's runtime
// fusion applies as it loads X.
TensorPtr add_conv(fe::graph::Graph& graph, const ConvGeom& g, DType io, bool prologue = false) {
  TensorPtr X = graph.tensor(nhwc("x", kX, g.n, g.h, g.w, g.c));
  if (prologue) X = add_bn_prologue(graph, X, g.c, /*relu=*/true, io);  // (X, the BN's input, is all that is read)
  auto W = graph.tensor(nhwc("w", kW, g.o, g.kh, g.kw, g.c));  // OHWI is NHWC-shaped
  auto conv = graph.conv_fprop(X, W, conv_attrs(fe::graph::Conv_fprop_attributes(), "conv", g));
  conv->set_data_type(fe::DataType_t::FLOAT);
  return conv;
}
// Marks t as the conv family's output Y [n, oh, ow, o] in the io dtype.
void conv_output(const TensorPtr& t, const ConvGeom& g, DType dt) {
  const int64_t o = g.o, oh = g.oh, ow = g.ow;
  t->set_uid(kY).set_dim({g.n, o, oh, ow}).set_stride({oh * ow * o, 1, ow * o, o}).set_data_type(fe_type(dt));
  t->set_output(true);
}

// A dgrad's (virtual, f32) output: the input's shape [n, c, h, w] with NHWC strides. The frontend
// cannot infer a dgrad's output dims ("For dgrad node, output dimension inferencing is not
// possible": several input sizes give one output size under striding), so they are set, as NVIDIA's
// dgrad samples do; tests/cpu_cudnn_graphs.cpp validates every dgrad graph.
void dgrad_output(const TensorPtr& t, const ConvGeom& g) {
  t->set_dim({g.n, g.c, g.h, g.w}).set_stride({g.h * g.w * g.c, 1, g.w * g.c, g.c}).set_data_type(fe::DataType_t::FLOAT);
}

// Lowers a described graph to a plan under BackendConfig's engine filters (the plain conv plans'
// filters, core/ops/conv/cuda.cpp), or returns a null graph with the reason in `why`.
Entry finish(std::shared_ptr<fe::graph::Graph> graph, DType dt, const BackendConfig& be, std::string& why) {
  auto deselect = [&](fe::graph::Graph& gr) {
    if (dt == DType::F32 && !be.allow_tf32)
      gr.deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
    if (be.deterministic) gr.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
    gr.deselect_workspace_greater_than(be.conv_workspace_limit);
  };
  Entry out;
  fe::error_t e = lower(*graph, cuda::dnn_handle(), conv_heur_modes(), deselect);
  if (e.is_good()) e = graph->get_workspace_size(out.workspace);
  if (e.is_bad()) {
    why = e.get_message();
    return Entry{};
  }
  out.graph = std::move(graph);
  return out;
}

// bn_finalize's f32 per-channel terms in the prologue graphs' I/O dtype (add_bn_prologue): C values,
// cast on the stream per call (a fresh, aligned allocation; freed stream-ordered after the graph).
Tensor in_io_dtype(const Tensor& t, DType io) { return t.dtype() == io ? t : ops::cast_raw(t, io); }

bool aligned16(const VariantPack& pack) {
  for (const auto& [uid, p] : pack)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// The graph for `key` (built by `describe` + finish on first use, cached, refusals included) run
// on the compute stream with `pack`. False when refused or when its execution fails (then never
// again for this key); `refused(why)` is told the first time.
bool run(Key key, DType dt, const std::function<std::shared_ptr<fe::graph::Graph>()>& describe,
         VariantPack pack, const std::function<void(const std::string&)>& refused) {
  if (!aligned16(pack)) return false;  // the frontend describes every tensor as 16-byte aligned
  const BackendConfig be = backend();
  const int device = cuda::current_device();
  key.insert(key.end(), {device, static_cast<int64_t>(dt), dt == DType::F32 && !be.allow_tf32, be.deterministic,
                         be.conv_workspace_limit});
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache->find(key);
  if (it == g_cache->end()) {
    std::string why;
    Entry e;
    try {  // an attribute this cuDNN rejects means no fused graph, not a failed op
      e = finish(describe(), dt, be, why);
    } catch (const std::exception& ex) {
      e = Entry{};
      why = ex.what();
    }
    if (!e.graph) refused(why.empty() ? "no engine takes the graph" : why);
    it = g_cache->emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  if (!e.graph) return false;
  fe::error_t st = execute(*e.graph, e.workspace, pack);
  if (st.is_bad()) {  // e.g. a runtime-compiled kernel that cannot launch
    (void)cudaGetLastError();  // do not let the next launch check report cuDNN's failure as its own
    refused(st.get_message());
    e = Entry{};
    return false;
  }
  return true;
}

Key conv_key(Kind kind, const ConvGeom& g, int64_t extra) {
  return {static_cast<int64_t>(kind), extra, g.n, g.h, g.w, g.c, g.o, g.kh, g.kw, g.oh, g.ow,
          g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dilation_h, g.p.dilation_w, g.p.groups};
}

}  // namespace

// ---- The graphs (cudnn_graph_builders.h): described from shapes and dtype alone ----
namespace cudnn_builders {

GraphPtr conv_bias_relu(const ConvGeom& g, DType dt, bool has_bias, int32_t target_sm) {
  auto graph = new_graph(dt, target_sm);
  auto pre = add_conv(*graph, g, dt);
  if (has_bias) {
    auto B = graph->tensor(nhwc("b", kB, 1, 1, 1, g.o));
    pre = graph->pointwise(pre, B, fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
    pre->set_data_type(fe::DataType_t::FLOAT);
  }
  auto Y = graph->pointwise(pre, fe::graph::Pointwise_attributes()
                                     .set_name("relu")
                                     .set_mode(fe::PointwiseMode_t::RELU_FWD)
                                     .set_relu_lower_clip(0.f));
  conv_output(Y, g, dt);
  return graph;
}

GraphPtr conv_genstats(const ConvGeom& g, DType dt, bool prologue, int32_t target_sm) {
  auto graph = new_graph(dt, target_sm);
  auto Y = add_conv(*graph, g, dt, prologue);
  conv_output(Y, g, dt);
  auto [SUM, SQ_SUM] = graph->genstats(Y, fe::graph::Genstats_attributes().set_name("genstats"));
  per_channel_output(SUM, kSum, g.o);
  per_channel_output(SQ_SUM, kSqSum, g.o);
  return graph;
}

GraphPtr conv_bn_relu_wgrad(const ConvGeom& g, DType dt, int32_t target_sm) {
  auto graph = new_graph(dt, target_sm);
  TensorPtr A = add_bn_prologue(*graph, input_x(*graph, g), g.c, /*relu=*/true, dt);
  auto DY = graph->tensor(nhwc("dy", kDy, g.n, g.oh, g.ow, g.o));
  auto DW = graph->conv_wgrad(DY, A, conv_attrs(fe::graph::Conv_wgrad_attributes(), "wgrad", g));
  DW->set_uid(kDw).set_dim({g.o, g.c, g.kh, g.kw}).set_stride({g.kh * g.kw * g.c, 1, g.kw * g.c, g.c});
  DW->set_data_type(fe_type(dt)).set_output(true);
  return graph;
}

GraphPtr conv_dgrad_drelu(const ConvGeom& g, DType dt, int32_t target_sm) {
  auto graph = new_graph(dt, target_sm);
  auto DY = graph->tensor(nhwc("dy", kDy, g.n, g.oh, g.ow, g.o));
  auto W = graph->tensor(nhwc("w", kW, g.o, g.kh, g.kw, g.c));
  auto DA = graph->conv_dgrad(DY, W, conv_attrs(fe::graph::Conv_dgrad_attributes(), "dgrad", g));
  dgrad_output(DA, g);
  // The mask from the pre-activation X * SCALE + BIAS, recomputed here: RELU_BWD(dy = DA, x = P).
  TensorPtr P = add_bn_prologue(*graph, input_x(*graph, g), g.c, /*relu=*/false, dt);
  auto drelu = fe::graph::Pointwise_attributes().set_name("drelu").set_mode(fe::PointwiseMode_t::RELU_BWD);
  auto DZ = graph->pointwise(DA, P, drelu.set_relu_lower_clip(0.f));
  DZ->set_uid(kDz).set_dim({g.n, g.c, g.h, g.w}).set_stride({g.h * g.w * g.c, 1, g.w * g.c, g.c});
  DZ->set_data_type(fe_type(dt)).set_output(true);
  return graph;
}

GraphPtr conv_dgrad_drelu_dbn(const ConvGeom& g, DType dt, int32_t target_sm) {
  auto graph = new_graph(dt, target_sm);
  auto DA = graph->conv_dgrad(graph->tensor(nhwc("dy", kDy, g.n, g.oh, g.ow, g.o)),
                              graph->tensor(nhwc("w", kW, g.o, g.kh, g.kw, g.c)),
                              conv_attrs(fe::graph::Conv_dgrad_attributes(), "dgrad", g));
  dgrad_output(DA, g);
  // The pre-activation in BN's own form, ((X - MEAN) * INV_STD) * WEIGHT + BIAS: the pattern
  // cuDNN's DgradDreluBNBwdWeight engines match (NVIDIA's sample builds it so, cuDNN >= 9.8,
  // Ampere/Hopper); equal to X * scale + bias up to rounding.
  TensorPtr X = input_x(*graph, g), MEAN = per_channel_input(*graph, "mean", kMean, g.c);
  TensorPtr INV_STD = per_channel_input(*graph, "inv_std", kInvStd, g.c);
  TensorPtr WEIGHT = per_channel_input(*graph, "weight", kWeight, g.c);
  TensorPtr P = X;
  const std::pair<TensorPtr, fe::PointwiseMode_t> chain[] = {{MEAN, fe::PointwiseMode_t::SUB},
                                                             {INV_STD, fe::PointwiseMode_t::MUL},
                                                             {WEIGHT, fe::PointwiseMode_t::MUL},
                                                             {per_channel_input(*graph, "bias", kBias, g.c),
                                                              fe::PointwiseMode_t::ADD}};
  for (const auto& [operand, mode] : chain) {
    P = graph->pointwise(P, operand, fe::graph::Pointwise_attributes().set_mode(mode));
    P->set_data_type(fe::DataType_t::FLOAT);
  }
  auto drelu = fe::graph::Pointwise_attributes().set_name("drelu").set_mode(fe::PointwiseMode_t::RELU_BWD);
  auto DZ = graph->pointwise(DA, P, drelu.set_relu_lower_clip(0.f));
  DZ->set_uid(kDz).set_dim({g.n, g.c, g.h, g.w}).set_stride({g.h * g.w * g.c, 1, g.w * g.c, g.c});
  DZ->set_data_type(fe_type(dt)).set_output(true);
  auto [DWEIGHT, DBIAS, EQ_DY, EQ_X, EQ_BIAS] =
      graph->dbn_weight(DZ, X, MEAN, INV_STD, WEIGHT, fe::graph::DBN_weight_attributes().set_name("dbn_weight"));
  const std::pair<TensorPtr, int64_t> outs[] = {
      {DWEIGHT, kDweight}, {DBIAS, kDbias}, {EQ_DY, kEqScaleDy}, {EQ_X, kEqScaleX}, {EQ_BIAS, kEqShift}};
  for (const auto& [t, uid] : outs) per_channel_output(t, uid, g.c);
  return graph;
}

GraphPtr bn_finalize(int64_t c, int64_t count, double eps, double momentum, int32_t target_sm) {
  auto graph = new_graph(DType::F32, target_sm);
  auto channel = [&](const char* name, int64_t uid) { return per_channel_input(*graph, name, uid, c); };
  auto SUM = channel("sum", kSum), SQ_SUM = channel("sq_sum", kSqSum);
  auto WEIGHT = channel("weight", kWeight), BIAS = channel("bias", kBias);
  auto RUN_MEAN = channel("running_mean", kRunMean), RUN_VAR = channel("running_var", kRunVar);
  // Graph constants (part of the cache key): eps, momentum and the count n (the unbiased factor n / (n - 1)).
  auto EPS = graph->tensor(fe::graph::Tensor_attributes(static_cast<float>(eps)));
  auto MOMENTUM = graph->tensor(fe::graph::Tensor_attributes(static_cast<float>(momentum)));
  auto COUNT = graph->tensor(fe::graph::Tensor_attributes(count));
  auto [EQ_SCALE, EQ_BIAS, MEAN, INV_STD, NEXT_MEAN, NEXT_VAR] = graph->bn_finalize(
      SUM, SQ_SUM, WEIGHT, BIAS, EPS, COUNT,
      fe::graph::BN_finalize_attributes().set_name("bn_finalize").set_previous_running_stats(RUN_MEAN, RUN_VAR, MOMENTUM));
  const std::pair<TensorPtr, int64_t> outs[] = {{EQ_SCALE, kEqScale}, {EQ_BIAS, kEqBias}, {MEAN, kMean},
                                                {INV_STD, kInvStd},   {NEXT_MEAN, kNextMean}, {NEXT_VAR, kNextVar}};
  for (const auto& [t, uid] : outs) per_channel_output(t, uid, c);
  return graph;
}

}  // namespace cudnn_builders
#endif  // TANDEM_CUDNN_GRAPHS

bool conv_graphs_built() { return TANDEM_CUDNN_GRAPHS != 0; }

bool conv2d_forward_bias_relu_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                         Tensor& y) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)x, (void)w, (void)b, (void)y;
  return false;
#else
  if (g.n == 0) return true;  // nothing to write
  if (g.p.groups != 1) return false;
  const bool has_bias = b.defined();
  auto describe = [&] { return cudnn_builders::conv_bias_relu(g, x.dtype(), has_bias); };
  VariantPack pack{{kX, x.data_ptr()}, {kW, w.data_ptr()}, {kY, y.data_ptr()}};
  if (has_bias) pack.emplace(kB, b.data_ptr());
  return run(conv_key(Kind::BiasRelu, g, has_bias), x.dtype(), describe, pack, [&](const std::string& why) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      note_conv_fallback(g, x.dtype(), "conv + bias + ReLU graph", "conv, then one bias+ReLU pass,", why.c_str());
  });
#endif
}

#if TANDEM_CUDNN_GRAPHS
namespace {
// conv2d_genstats's graph, with the BN + ReLU prologue when scale is defined.
bool genstats_graph(const ConvGeom& g, const Tensor& x, const Tensor* scale, const Tensor* bias, const Tensor& w,
                    Tensor& y, Tensor& sum, Tensor& sq_sum) {
  if (g.n == 0 || g.p.groups != 1) return false;  // (no rows: the reference writes the zero sums)
  const bool prologue = scale != nullptr;
  auto describe = [&] { return cudnn_builders::conv_genstats(g, x.dtype(), prologue); };
  VariantPack pack{{kX, x.data_ptr()},     {kW, w.data_ptr()},          {kY, y.data_ptr()},
                                          {kSum, sum.data_ptr()}, {kSqSum, sq_sum.data_ptr()}};
  if (prologue) pack.insert({{kPrologueScale, scale->data_ptr()}, {kPrologueBias, bias->data_ptr()}});
  const Kind kind = prologue ? Kind::BnReluGenstats : Kind::Genstats;
  return run(conv_key(kind, g, 0), x.dtype(), describe, pack, [&](const std::string& why) {
    static std::atomic<bool> said[2] = {false, false};  // once per graph kind
    if (said[prologue].exchange(true)) return;
    if (prologue)
      note_conv_fallback(g, x.dtype(), "BN + ReLU prologue + conv + genstats graph",
                         "the BN + ReLU pass, the conv, then the statistics by tensor ops,", why.c_str());
    else
      note_conv_fallback(g, x.dtype(), "conv + genstats graph", "conv, then the statistics by tensor ops,",
                         why.c_str());
  });
}
}  // namespace
#endif

bool conv2d_forward_genstats_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& w, Tensor& y, Tensor& sum,
                                        Tensor& sq_sum) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)x, (void)w, (void)y, (void)sum, (void)sq_sum;
  return false;
#else
  return genstats_graph(g, x, nullptr, nullptr, w, y, sum, sq_sum);
#endif
}

bool conv2d_forward_bn_relu_genstats_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& scale,
                                                const Tensor& bias, const Tensor& w, Tensor& y, Tensor& sum,
                                                Tensor& sq_sum) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)x, (void)scale, (void)bias, (void)w, (void)y, (void)sum, (void)sq_sum;
  return false;
#else
  if (scale.dtype() != DType::F32 || bias.dtype() != DType::F32 || scale.numel() != g.c || bias.numel() != g.c)
    return false;
  const Tensor s = in_io_dtype(scale, x.dtype()), b = in_io_dtype(bias, x.dtype());
  return genstats_graph(g, x, &s, &b, w, y, sum, sq_sum);
#endif
}

#if TANDEM_CUDNN_GRAPHS
namespace {
// Runs one of the prologue's backward graphs: `pack` holds its own tensors, this adds X, SCALE,
// BIAS and DY; the first refusal of each kind is noted once.
bool prologue_backward(Kind kind, const ConvGeom& g, const Tensor& x, const Tensor& scale, const Tensor& bias,
                       const Tensor& dy, VariantPack pack,
                       const std::function<std::shared_ptr<fe::graph::Graph>()>& describe, const char* graph,
                       const char* instead) {
  if (g.n == 0 || g.p.groups != 1 || scale.dtype() != DType::F32 || bias.dtype() != DType::F32) return false;
  const Tensor s = in_io_dtype(scale, dy.dtype()), b = in_io_dtype(bias, dy.dtype());
  pack.insert({{kX, x.data_ptr()}, {kPrologueScale, s.data_ptr()}, {kPrologueBias, b.data_ptr()}, {kDy, dy.data_ptr()}});
  static std::atomic<bool> said[2] = {false, false};
  std::atomic<bool>& once = said[kind == Kind::BnReluWgrad ? 0 : 1];
  return run(conv_key(kind, g, 0), dy.dtype(), describe, std::move(pack), [&](const std::string& why) {
    if (!once.exchange(true)) note_conv_fallback(g, dy.dtype(), graph, instead, why.c_str());
  });
}
}  // namespace
#endif

bool conv2d_backward_filter_bn_relu_graph_cuda(const ConvGeom& g, const Tensor& x, const Tensor& scale,
                                               const Tensor& bias, const Tensor& dy, Tensor& dw) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)x, (void)scale, (void)bias, (void)dy, (void)dw;
  return false;
#else
  auto describe = [&] { return cudnn_builders::conv_bn_relu_wgrad(g, x.dtype()); };
  return prologue_backward(Kind::BnReluWgrad, g, x, scale, bias, dy, {{kDw, dw.data_ptr()}}, describe,
                           "BN + ReLU prologue + wgrad graph", "the BN + ReLU pass, then wgrad,");
#endif
}

bool conv2d_backward_data_drelu_graph_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, const Tensor& x,
                                           const Tensor& scale, const Tensor& bias, Tensor& dz) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)dy, (void)w, (void)x, (void)scale, (void)bias, (void)dz;
  return false;
#else
  auto describe = [&] { return cudnn_builders::conv_dgrad_drelu(g, dy.dtype()); };
  return prologue_backward(Kind::BnReluDgradDrelu, g, x, scale, bias, dy, {{kW, w.data_ptr()}, {kDz, dz.data_ptr()}},
                           describe, "dgrad + ReLU-mask graph", "dgrad, the BN + ReLU pass, then the mask,");
#endif
}

bool conv2d_backward_data_drelu_dbn_graph_cuda(const ConvGeom& g, const Tensor& dy, const Tensor& w, const Tensor& x,
                                               const BnBackwardIn& bn, Tensor& dz, const BnBackwardOut& out) {
#if !TANDEM_CUDNN_GRAPHS
  (void)g, (void)dy, (void)w, (void)x, (void)bn, (void)dz, (void)out;
  return false;
#else
  if (g.n == 0 || g.p.groups != 1 || dy.dtype() == DType::F32) return false;  // (16-bit engines only)
  for (const Tensor* t : {&bn.mean, &bn.inv_std, &bn.weight, &bn.bias})
    if (t->dtype() != DType::F32) return false;
  auto describe = [&] { return cudnn_builders::conv_dgrad_drelu_dbn(g, dy.dtype()); };
  VariantPack pack{
      {kDy, dy.data_ptr()},          {kW, w.data_ptr()},           {kX, x.data_ptr()},
      {kMean, bn.mean.data_ptr()},   {kInvStd, bn.inv_std.data_ptr()}, {kWeight, bn.weight.data_ptr()},
      {kBias, bn.bias.data_ptr()},   {kDz, dz.data_ptr()},         {kDweight, out.dweight.data_ptr()},
      {kDbias, out.dbias.data_ptr()}, {kEqScaleDy, out.eq_scale_dy.data_ptr()},
      {kEqScaleX, out.eq_scale_x.data_ptr()}, {kEqShift, out.eq_bias.data_ptr()}};
  return run(conv_key(Kind::BnReluDgradDreluDbn, g, 0), dy.dtype(), describe, pack, [&](const std::string& why) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      note_conv_fallback(g, dy.dtype(), "dgrad + ReLU-mask + BN-backward-weight graph",
                         "the dgrad + ReLU-mask graph, then BN's backward reductions by tensor ops,", why.c_str());
  });
#endif
}

bool bn_finalize_graph_cuda(const BnFinalizeIn& in, const BnFinalizeOut& out) {
#if !TANDEM_CUDNN_GRAPHS
  (void)in, (void)out;
  return false;
#else
  if (in.sum.dtype() != DType::F32) return false;
  const int64_t c = in.sum.numel();
  auto describe = [&] { return cudnn_builders::bn_finalize(c, in.count, in.eps, in.momentum); };
  VariantPack pack{
      {kSum, in.sum.data_ptr()},         {kSqSum, in.sq_sum.data_ptr()},       {kWeight, in.weight.data_ptr()},
      {kBias, in.bias.data_ptr()},       {kRunMean, in.running_mean.data_ptr()}, {kRunVar, in.running_var.data_ptr()},
      {kEqScale, out.scale.data_ptr()},  {kEqBias, out.bias.data_ptr()},        {kMean, out.mean.data_ptr()},
      {kInvStd, out.inv_std.data_ptr()}, {kNextMean, out.next_running_mean.data_ptr()},
      {kNextVar, out.next_running_var.data_ptr()}};
  // Constants are doubles in the key: their bits, so two momenta never share a graph.
  Key key{static_cast<int64_t>(Kind::BnFinalize), c, in.count, std::bit_cast<int64_t>(in.eps),
          std::bit_cast<int64_t>(in.momentum)};
  return run(key, DType::F32, describe, pack, [&](const std::string& why) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr, "tandem: cuDNN bn_finalize graph not available for %lld channels (%s): tensor ops instead "
                   "(noted once)\n", static_cast<long long>(c), why.c_str());
  });
#endif
}

}  // namespace tandem::kernels
