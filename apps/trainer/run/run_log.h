// apps/trainer/run/run_log.h: the per-step JSON-lines run log (--log-file) and the elapsed/ETA figures
// both trainers print at the end of their progress lines.
//
// The log is what apps/scripts/plot_run.py reads (its header has the schema): one JSON object per
// line, "event" saying the kind - "start" (program, run id, world size, model, unit, the effective
// configuration), "step" (one per progress line: step, epoch, samples, loss, lr, throughput, the
// ms split, memory, loss scale, elapsed_s, eta_s), "val" (one per validation) and "end" (the run's
// totals). Rank 0 writes; each record is flushed at once, so a log read while the run goes on (or
// after a crash) holds every record up to the last full line. A resumed run appends to the same
// file (the default name carries the run id): plot_run.py drops the records past the resumed step.
// Without a --log-file and a checkpoint folder there is no log (RunLog::enabled() is false and
// write() does nothing), so the trainers call it unconditionally.
//
// ETA: the training time still to go at this invocation's mean rate so far (training time - paused
// validation and checkpoints excluded - per step, times the steps left). Pauses still to come are
// not in it, so a run that validates often ends a little later than its first ETAs say.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/trainer/run/clock.h"  // defines: RunClock

namespace tandem::trainer {

// "45s", "1m23s", "2h05m" (whole seconds below an hour, whole minutes above).
std::string duration_text(double seconds);

struct Eta {
  double elapsed_s = 0;  // since the process started (as plot_run.py's elapsed_s)
  double eta_s = -1;     // training time left; -1 before a step of this invocation has run
};
// `steps_done`: steps this invocation has taken; `steps_left`: steps it still has to take.
Eta eta(const RunClock& clock, int64_t steps_done, int64_t steps_left);
// " | elapsed 1m23s eta 4m05s": the progress lines' last field.
std::string eta_text(const Eta& e);

class RunLog {
 public:
  RunLog() = default;  // disabled
  // The log's path: `log_file` when given, else <checkpoint_dir>/log_<run_id>.jsonl when there is
  // a folder, else "" (no log).
  static std::string path_for(const std::string& log_file, const std::string& checkpoint_dir, const std::string& run_id);
  // Opens `path` for appending on rank 0 (`writer`); "" or !writer: disabled.
  static RunLog open(const std::string& path, bool writer);
  bool enabled() const { return out_ != nullptr; }
  const std::string& path() const { return path_; }
  // Appends `record` as one line (nothing when disabled).
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::shared_ptr<std::ofstream> out_;
};

}  // namespace tandem::trainer
