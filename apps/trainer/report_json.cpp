// apps/trainer/report_json.cpp: see report_json.h.
#include "apps/trainer/report_json.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/trainer/step.h"

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
