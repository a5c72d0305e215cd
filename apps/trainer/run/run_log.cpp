// apps/trainer/run/run_log.cpp: the JSON-lines run log and the ETA (see run_log.h).
#include "apps/trainer/run/run_log.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/check.h"  // defines: TANDEM_CHECK

namespace tandem::trainer {

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char b[48];
  if (s < 60) std::snprintf(b, sizeof b, "%llds", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(b, sizeof b, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return b;
}

Eta eta(const RunClock& clock, int64_t steps_done, int64_t steps_left) {
  Eta e;
  e.elapsed_s = clock.wall_s();
  if (steps_done <= 0 || clock.init_s < 0) return e;
  const double trained_s = seconds_since(clock.first_step) - clock.paused_s;
  e.eta_s = trained_s / static_cast<double>(steps_done) * static_cast<double>(std::max<int64_t>(steps_left, 0));
  return e;
}

std::string eta_text(const Eta& e) {
  return " | elapsed " + duration_text(e.elapsed_s) + " eta " + (e.eta_s < 0 ? std::string("?") : duration_text(e.eta_s));
}

std::string RunLog::path_for(const std::string& log_file, const std::string& checkpoint_dir, const std::string& run_id) {
  if (!log_file.empty()) return log_file;
  if (checkpoint_dir.empty() || run_id.empty()) return "";
  return (std::filesystem::path(checkpoint_dir) / ("log_" + run_id + ".jsonl")).string();
}

RunLog RunLog::open(const std::string& path, bool writer) {
  RunLog log;
  if (path.empty() || !writer) return log;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  log.out_ = std::make_shared<std::ofstream>(path, std::ios::app);
  TANDEM_CHECK(log.out_->good(), "could not open the run log ", path, " for appending: check --log-file's folder");
  log.path_ = path;
  return log;
}

void RunLog::write(const nlohmann::json& record) {
  if (!out_) return;
  // NaN (a skipped interval's loss) is not JSON: null, which plot_run.py draws as a gap.
  *out_ << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out_->flush();
}

}  // namespace tandem::trainer
