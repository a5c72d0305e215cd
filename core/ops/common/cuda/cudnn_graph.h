// core/ops/common/cuda/cudnn_graph.h: what the files that build cuDNN frontend graphs share
// (core/ops/conv/cuda_graph.cpp, core/ops/attention/cuda_cudnn_sdpa.cpp): the frontend's header
// behind TANDEM_HAVE_CUDNN_FRONTEND, the names they use, a graph with tandem's precision settings
// and one way to run a built graph.
// Include it from those .cpp files only: <cudnn_frontend.h> costs ~40 s of compile per file.
// TANDEM_CUDNN_GRAPHS is 1 where the frontend is built in (third_party/CMakeLists.txt), else 0 and
// nothing below exists; the includer then takes its other path.
#pragma once

#if defined(TANDEM_HAVE_CUDNN_FRONTEND) && TANDEM_HAVE_CUDNN_FRONTEND
#define TANDEM_CUDNN_GRAPHS 1
#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

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
// tandem's unfused kernels accumulate in).
inline std::shared_ptr<fe::graph::Graph> new_graph(DType io) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe_type(io))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
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
