// core/ops/attention/cuda_cudnn_sdpa.cpp: AttentionBackend::Fused - cuDNN's fused flash attention
// (SDPA), forward and backward, as cuDNN frontend graphs (semantics in core/ops/attention/attention.h,
// the arguments in core/ops/attention/kernels.h). The attention folder's only file that includes the
// frontend (through core/ops/common/cuda/cudnn_graph.h; ~40 s to compile); without the frontend (TANDEM_HAVE_CUDNN_FRONTEND=0) every problem is refused
// with a reason and attention takes the reference path.
//
// Graphs. One forward graph (sdpa node, generate_stats on: the backward needs the per-row
// log-sum-exp) and one backward graph (sdpa_backward) per problem: sizes, the four stride sets,
// dtype, scale, dropout probability, padding on/off and device. Building one costs milliseconds
// (heuristics, plan compilation), so both are built on the problem's first call, together - a
// problem whose forward ran can then never be refused in its backward - and kept for the process
// (a model has a handful of attention shapes). A refusal is cached too, with its reason, so Auto
// falls back at once on later calls; an exception from the frontend while building is a refusal.
// The graphs are described by cudnn_builders::sdpa_forward/sdpa_backward (core/ops/common/cuda/
// cudnn_graph_builders.h), which tests/cpu_cudnn_graphs.cpp checks on a machine without a GPU.
// Tensors. Q, K, V, O, dO, dQ, dK, dV are described by dims {B, H, S, D} and the caller's strides:
// attention_qkv's q, k, v are views into the fused projection's output, its O is [B, S, H * D],
// and dQ, dK, dV land in one d(qkv) buffer - cuDNN reads and writes through the strides, nothing
// is copied. Stats [B, H, Sq, 1] f32. I/O in f16/bf16, intermediates and compute in f32.
// Padding: padding_mask with seq_len_q = Sq for every sequence (all queries computed, as the
// reference does) and seq_len_kv = the sequence's kept keys, both i32 [B, 1, 1, 1] on the device.
// Dropout: cuDNN's Philox, seed and first counter i64 [1, 1, 1, 1] on the device (read at run
// time, so a captured CUDA graph replays with the values its GraphRng slot holds then).
// Execution: on tandem's per-device cuDNN handle (bound to the compute stream, no sync); the
// workspace is a Storage from tandem's allocator, freed stream-ordered after the call.
// cuDNN's backward may accumulate dQ with atomics (its default engine choice, as PyTorch's): the
// backward is not guaranteed bitwise deterministic.
#include <cudnn.h>
#include <cuda_runtime.h>

#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/ops/attention/kernels.h"
#include "core/ops/common/cuda/cudnn_graph.h"
#include "core/ops/common/cuda/cudnn_graph_builders.h"
#include "core/ops/common/cuda/dnn_handle.h"

namespace tandem::kernels {

#if TANDEM_CUDNN_GRAPHS
namespace {
using namespace cudnn_graph;  // fe, TensorPtr, VariantPack, new_graph, execute

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv, kSeed, kOffset, kDO, kDQ, kDK, kDV };

struct Graphs {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t fwd_ws = 0, bwd_ws = 0;
  std::string refused;  // non-empty: cuDNN refused this problem (the graphs are null)
};

std::mutex g_mutex;
std::map<std::vector<int64_t>, std::shared_ptr<Graphs>> g_cache;

std::vector<int64_t> key_of(const SdpaArgs& a) {
  std::vector<int64_t> k{cuda::current_device(), a.b, a.h, a.sq, a.sk, a.d, static_cast<int64_t>(a.dtype),
                         static_cast<int64_t>(a.padded)};
  for (const int64_t* s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride}) k.insert(k.end(), s, s + 3);
  float f[2] = {a.scale, a.dropout_p};
  int32_t bits[2];
  static_assert(sizeof(f) == sizeof(bits));
  std::memcpy(bits, f, sizeof(f));
  k.push_back(bits[0]);
  k.push_back(bits[1]);
  return k;
}

// A {B, H, S, D} tensor with the caller's strides (dim stride 1).
fe::graph::Tensor_attributes bhsd(const char* name, int64_t uid, int64_t b, int64_t h, int64_t s, int64_t d,
                                  const int64_t (&st)[3]) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, h, s, d}).set_stride(
      {st[0], st[1], st[2], 1});
}

// The inputs both graphs share: lengths (padding) and seed/offset (dropout), added to `opt`.
template <typename Attrs> void add_padding_and_dropout(fe::graph::Graph& g, const SdpaArgs& a, Attrs& opt) {
  auto scalar = [&](const char* name, int64_t uid, fe::DataType_t t, int64_t n) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1}).set_stride(
        {1, 1, 1, 1}).set_data_type(t));
  };
  if (a.padded)
    opt.set_padding_mask(true)
        .set_seq_len_q(scalar("seq_len_q", kSeqQ, fe::DataType_t::INT32, a.b))
        .set_seq_len_kv(scalar("seq_len_kv", kSeqKv, fe::DataType_t::INT32, a.b));
  if (a.dropout_p > 0.0f)
    opt.set_dropout(a.dropout_p, scalar("seed", kSeed, fe::DataType_t::INT64, 1),
                    scalar("offset", kOffset, fe::DataType_t::INT64, 1));
}

}  // namespace

// ---- The graphs (cudnn_graph_builders.h): described from the problem alone ----
namespace cudnn_builders {

GraphPtr sdpa_forward(const SdpaArgs& a, int32_t target_sm) {
  auto g = new_graph(a.dtype, target_sm);
  auto Q = g->tensor(bhsd("Q", kQ, a.b, a.h, a.sq, a.d, a.q_stride));
  auto K = g->tensor(bhsd("K", kK, a.b, a.h, a.sk, a.d, a.k_stride));
  auto V = g->tensor(bhsd("V", kV, a.b, a.h, a.sk, a.d, a.v_stride));
  auto opt = fe::graph::SDPA_attributes().set_name("tandem_sdpa").set_generate_stats(true).set_attn_scale(a.scale);
  add_padding_and_dropout(*g, a, opt);
  auto [O, Stats] = g->sdpa(Q, K, V, opt);
  O->set_output(true).set_uid(kO).set_dim({a.b, a.h, a.sq, a.d}).set_stride(
      {a.o_stride[0], a.o_stride[1], a.o_stride[2], 1});
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({a.b, a.h, a.sq, 1})
      .set_stride({a.h * a.sq, a.sq, 1, 1});
  return g;
}

GraphPtr sdpa_backward(const SdpaArgs& a, int32_t target_sm) {
  auto g = new_graph(a.dtype, target_sm);
  auto Q = g->tensor(bhsd("Q", kQ, a.b, a.h, a.sq, a.d, a.q_stride));
  auto K = g->tensor(bhsd("K", kK, a.b, a.h, a.sk, a.d, a.k_stride));
  auto V = g->tensor(bhsd("V", kV, a.b, a.h, a.sk, a.d, a.v_stride));
  auto O = g->tensor(bhsd("O", kO, a.b, a.h, a.sq, a.d, a.o_stride));
  auto dO = g->tensor(bhsd("dO", kDO, a.b, a.h, a.sq, a.d, a.o_stride));
  auto Stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim({a.b, a.h, a.sq, 1})
                             .set_stride({a.h * a.sq, a.sq, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
  auto opt = fe::graph::SDPA_backward_attributes().set_name("tandem_sdpa_backward").set_attn_scale(a.scale);
  add_padding_and_dropout(*g, a, opt);
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opt);
  auto out_like = [](TensorPtr& t, int64_t uid, const fe::graph::Tensor_attributes& like) {
    t->set_output(true).set_uid(uid).set_dim(like.get_dim()).set_stride(like.get_stride());
  };
  out_like(dQ, kDQ, *Q);
  out_like(dK, kDK, *K);
  out_like(dV, kDV, *V);
  return g;
}

}  // namespace cudnn_builders

namespace {
// Builds both graphs; sets `refused` on the first failure.
std::shared_ptr<Graphs> build(const SdpaArgs& a) {
  auto out = std::make_shared<Graphs>();
  cudnnHandle_t handle = cuda::dnn_handle();
  auto finish = [&](fe::graph::Graph& g, int64_t& ws, const char* which) {
    fe::error_t st = lower(g, handle, sdpa_heur_modes());  // (the one-call build(handle, ...) is deprecated)
    if (st.is_good()) st = g.get_workspace_size(ws);
    if (!st.is_good()) out->refused = std::string(which) + ": " + st.get_message();
    return st.is_good();
  };
  auto fwd = cudnn_builders::sdpa_forward(a);
  if (!finish(*fwd, out->fwd_ws, "forward")) return out;
  auto bwd = cudnn_builders::sdpa_backward(a);
  if (!finish(*bwd, out->bwd_ws, "backward")) return out;
  out->fwd = std::move(fwd);
  out->bwd = std::move(bwd);
  return out;
}

std::shared_ptr<Graphs> graphs(const SdpaArgs& a) {
  const std::vector<int64_t> key = key_of(a);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(key);
  if (it == g_cache.end()) {
    std::shared_ptr<Graphs> built;
    try {  // the frontend may throw (an attribute this cuDNN rejects): a refusal, cached, not a failed op
      built = build(a);
    } catch (const std::exception& ex) {
      built = std::make_shared<Graphs>();
      built->refused = std::string("the cuDNN frontend threw: ") + ex.what();
    }
    it = g_cache.emplace(key, std::move(built)).first;
  }
  return it->second;
}

void* mut(const void* p) { return const_cast<void*>(p); }

void run(const fe::graph::Graph& g, int64_t ws_bytes, VariantPack& pack, const SdpaArgs& a, const int32_t* lengths,
         const int64_t* rng, const char* what) {
  if (a.padded) pack[kSeqQ] = mut(lengths), pack[kSeqKv] = mut(lengths + a.b);
  if (a.dropout_p > 0.0f) pack[kSeed] = mut(rng), pack[kOffset] = mut(rng + 1);
  fe::error_t st = execute(g, ws_bytes, pack);
  TANDEM_CHECK(st.is_good(), "cuDNN SDPA ", what, " failed to run: ", st.get_message(),
               "; run with AttentionBackend::Reference (BertConfig::attention_backend) and report the shapes");
}

}  // namespace
#endif  // TANDEM_CUDNN_GRAPHS

std::string sdpa_cudnn_unsupported(DType dtype, int64_t d) {
#if !TANDEM_CUDNN_GRAPHS
  return "this build has no cuDNN frontend headers (apps/scripts/setup.sh fetches them)";
#else
  if (dtype != DType::F16 && dtype != DType::BF16)
    return std::string("cuDNN's SDPA takes f16/bf16, not ") + dtype_name(dtype);
  if (d % 8 != 0 || d > 128) return "the head dim must be a multiple of 8 and at most 128, got " + std::to_string(d);
  if (cudnnGetVersion() < 90000) return "cuDNN " + std::to_string(cudnnGetVersion()) + " is older than 9.0";
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cuda::current_device()),
             "compute capability");
  if (major < 8) return "cuDNN's flash attention needs sm80 or newer, this GPU is sm" + std::to_string(major) + "x";
  return "";
#endif
}

bool sdpa_cudnn_prepare(const SdpaArgs& a, std::string& why) {
#if TANDEM_CUDNN_GRAPHS
  why = graphs(a)->refused;
#else
  why = sdpa_cudnn_unsupported(a.dtype, a.d);
#endif
  return why.empty();
}

void sdpa_cudnn_fwd(const SdpaArgs& a, const void* q, const void* k, const void* v, const int32_t* lengths,
                    const int64_t* rng, void* o, float* stats) {
#if TANDEM_CUDNN_GRAPHS
  auto g = graphs(a);
  TANDEM_CHECK(g->fwd, "cuDNN SDPA forward: the problem was refused (", g->refused, "); call sdpa_cudnn_prepare first");
  VariantPack pack{{kQ, mut(q)}, {kK, mut(k)}, {kV, mut(v)}, {kO, o}, {kStats, stats}};
  run(*g->fwd, g->fwd_ws, pack, a, lengths, rng, "forward");
#else
  TANDEM_THROW("cuDNN SDPA forward: this build has no cuDNN frontend; attention should have taken the reference path");
#endif
}

void sdpa_cudnn_bwd(const SdpaArgs& a, const void* q, const void* k, const void* v, const void* o, const void* dout,
                    const float* stats, const int32_t* lengths, const int64_t* rng, void* dq, void* dk, void* dv) {
#if TANDEM_CUDNN_GRAPHS
  auto g = graphs(a);
  TANDEM_CHECK(g->bwd, "cuDNN SDPA backward: the problem was refused (", g->refused, ")");
  VariantPack pack{{kQ, mut(q)},   {kK, mut(k)},         {kV, mut(v)},
                                          {kO, mut(o)},   {kDO, mut(dout)},     {kStats, mut(stats)},
                                          {kDQ, dq},      {kDK, dk},            {kDV, dv}};
  run(*g->bwd, g->bwd_ws, pack, a, lengths, rng, "backward");
#else
  TANDEM_THROW("cuDNN SDPA backward: this build has no cuDNN frontend");
#endif
}

}  // namespace tandem::kernels
