// core/ops/common/cuda/cudnn_graph.h: what the files that build cuDNN frontend graphs share
// (core/ops/conv/cuda_graph.cpp, core/ops/attention/cuda_cudnn_sdpa.cpp): the frontend's header
// behind TANDEM_HAVE_CUDNN_FRONTEND, the names they use, a graph with tandem's precision settings
// one way to lower a described graph to plans (with a handle, or deviceless for the CPU test) and
// one way to run a built graph.
// Include it from those .cpp files only: <cudnn_frontend.h> costs ~40 s of compile per file.
// TANDEM_CUDNN_GRAPHS is 1 where the frontend is built in (third_party/CMakeLists.txt), else 0 and
// nothing below exists; the includer then takes its other path.
#pragma once

#if defined(TANDEM_HAVE_CUDNN_FRONTEND) && TANDEM_HAVE_CUDNN_FRONTEND
#define TANDEM_CUDNN_GRAPHS 1
#include <cudnn_frontend.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/cuda/context.h"
#include "core/dtype.h"
#include "core/ops/common/cuda/dnn_handle.h"
#include "core/storage.h"

namespace tandem::cudnn_graph {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using VariantPack = std::unordered_map<int64_t, void*>;

// The frontend's name for a tensor dtype (f32, f16, bf16; the ops refuse f64 on CUDA before this).
inline fe::DataType_t fe_type(DType t) {
  if (t == DType::BF16) return fe::DataType_t::BFLOAT16;
  if (t == DType::F16) return fe::DataType_t::HALF;
  TANDEM_CHECK(t == DType::F32, "the cuDNN graphs take f32, f16 or bf16, got ", dtype_name(t), ": cast first");
  return fe::DataType_t::FLOAT;
}

// An empty graph whose inputs and outputs are `io`, with f32 intermediates and compute (what
// tandem's unfused kernels accumulate in). `target_sm` (e.g. 90): the GPU the graph is for, where
// there is none to ask (tests/cpu_cudnn_graphs.cpp); 0: the current device, asked when a node's
// checks need it. Set before any node is added: each node copies the graph's settings when made.
inline std::shared_ptr<fe::graph::Graph> new_graph(DType io, int32_t target_sm = 0) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe_type(io))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  if (target_sm > 0) graph->set_sm_version(target_sm);
  return graph;
}

// The frontend's one-call build(handle, ...) is marked for removal; these are its steps.
// support(): validate, the backend operation graph, the heuristics' candidates in `modes`, `deselect`
// (engine filters, may be empty) and the support check - OK when some candidate engine takes the
// graph. On `handle`; with a null handle, deviceless, from the DeviceProperties and SM version set on
// the graph (tests/cpu_cudnn_graphs.cpp). lower(): support(), then the plan build (the first
// candidate that compiles; runtime-compiled engines need the driver here).
inline fe::error_t support(fe::graph::Graph& graph, cudnnHandle_t handle, const std::vector<fe::HeurMode_t>& modes,
                           const std::function<void(fe::graph::Graph&)>& deselect = {}) {
  if (auto e = graph.validate(); e.is_bad()) return e;
  if (auto e = handle ? graph.build_operation_graph(handle) : graph.build_operation_graph(); e.is_bad()) return e;
  if (auto e = graph.create_execution_plans(modes); e.is_bad()) return e;
  if (deselect) deselect(graph);
  return graph.check_support();
}
inline fe::error_t lower(fe::graph::Graph& graph, cudnnHandle_t handle, const std::vector<fe::HeurMode_t>& modes,
                         const std::function<void(fe::graph::Graph&)>& deselect = {}) {
  if (auto e = support(graph, handle, modes, deselect); e.is_bad()) return e;
  return graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
}

// The heuristic modes each family lowers with: the conv graphs take mode A's candidates, then the
// FALLBACK list's (runtime-fusion graphs are often only in the latter); SDPA takes mode A's.
inline const std::vector<fe::HeurMode_t>& conv_heur_modes() {
  static const std::vector<fe::HeurMode_t> modes{fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK};
  return modes;
}
inline const std::vector<fe::HeurMode_t>& sdpa_heur_modes() {
  static const std::vector<fe::HeurMode_t> modes{fe::HeurMode_t::A};
  return modes;
}

// Runs a built graph on tandem's cuDNN handle (bound to the compute stream: no sync) with a
// `workspace_bytes` workspace from tandem's allocator, freed stream-ordered when this returns.
inline fe::error_t execute(const fe::graph::Graph& graph, int64_t workspace_bytes, VariantPack& pack) {
  Storage workspace(static_cast<size_t>(workspace_bytes), Device::cuda(cuda::current_device()));
  return graph.execute(cuda::dnn_handle(), pack, workspace_bytes > 0 ? workspace.data() : nullptr);
}

}  // namespace tandem::cudnn_graph

#else
#define TANDEM_CUDNN_GRAPHS 0
#endif
