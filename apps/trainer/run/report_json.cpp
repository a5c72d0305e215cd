// apps/trainer/run/report_json.cpp: see report_json.h.
#include "apps/trainer/run/report_json.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/trainer/step/step.h"
#include "core/ops/attention/attention.h"  // defines: attention_path_stats
#include "core/ops/batchnorm/batchnorm.h"  // defines: batchnorm_cudnn_stats
#include "core/ops/conv/conv.h"            // defines: conv_bias_fusion_stats, conv_bias_relu_stats
#include "core/ops/conv_bn/conv_bn.h"      // defines: conv_bn_fusion_stats
#include "core/ops/matmul/matmul.h"        // defines: gemm_epilogue_stats

namespace tandem::trainer {

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f MiB", bytes / 1048576.0);
  return b;
}

nlohmann::json step_record_times(const StepTimes& t, double overlap, const MemoryStats& m) {
  return {{"ms", {{"step", t.step_ms}, {"data", t.data_ms}, {"compute", t.compute_ms}, {"exposed_comm", t.exposed_comm_ms},
                  {"host", t.host_ms}}},
          {"overlap", overlap},
          {"mem_mib", m.current_bytes / 1048576.0},
          {"peak_mib", m.peak_bytes / 1048576.0}};
}

nlohmann::json gpu_paths_metrics() {
  const ops::AttentionPathStats att = ops::attention_path_stats();
  const ops::GemmEpilogueStats gemm = ops::gemm_epilogue_stats();
  const ops::ConvBiasFusionStats conv_bias = ops::conv_bias_fusion_stats();
  const ops::GraphFusionStats relu_graph = ops::conv_bias_relu_stats(), conv_bn = ops::conv_bn_fusion_stats();
  const ops::BatchNormCudnnStats bn = ops::batchnorm_cudnn_stats();
  using nlohmann::json;
  auto pair = [](const char* a, int64_t x, const char* b, int64_t y) { return json{{a, x}, {b, y}}; };
  return json{{"gpu_paths",
               {{"attention_sdpa", pair("fused", att.fused, "reference", att.reference)},
                {"gemm_bias", pair("fused", gemm.bias_fused, "separate", gemm.bias_separate)},
                {"gemm_bgradb", pair("fused", gemm.bgradb_fused, "separate", gemm.bgradb_separate)},
                {"conv_bias", pair("fused", conv_bias.fused, "separate", conv_bias.unfused)},
                {"conv_bias_relu_graph", pair("fused", relu_graph.fused, "fallback", relu_graph.unfused)},
                {"conv_bn_graph", pair("fused", conv_bn.fused, "fallback", conv_bn.unfused)},
                {"batchnorm_cudnn",
                 {{"bn", bn.forward + bn.backward},
                  {"bn_relu", bn.forward_relu + bn.backward_relu},
                  {"bn_add_relu", bn.forward_fused + bn.backward_fused},
                  {"fallbacks", bn.fallbacks}}}}}};
}

nlohmann::json comm_and_memory_metrics(const dist::TimelineSummary& comm, const MemoryStats& mem) {
  return {{"comm", {{"comm_ms_per_step", comm.comm_ms}, {"exposed_ms_per_step", comm.exposed_ms},
                    {"overlap", comm.overlap}, {"steps", comm.steps}}},
          {"memory", {{"current_bytes", mem.current_bytes}, {"peak_bytes", mem.peak_bytes}}}};
}

nlohmann::json launch_counts_json(const LaunchCounts& c) {
  return {{"casts", c.casts}, {"cast_pairs", c.cast_pairs}, {"gemms", c.gemms}, {"f32_gemms", c.f32_gemms},
          {"misaligned_16bit_gemms", c.misaligned_gemms}};
}

void write_json_file(const std::string& file, const nlohmann::json& j) {
  std::filesystem::path p(file);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(file) << j.dump(2) << "\n";
}

}  // namespace tandem::trainer
