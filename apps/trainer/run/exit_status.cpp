// apps/trainer/run/exit_status.cpp: the exit-status table and the folder's run_status.json (see
// exit_status.h).
#include "apps/trainer/run/exit_status.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"       // defines: utc_timestamp
#include "checkpoint/checkpoint_lock.h"  // defines: this_process

namespace tandem::trainer {

namespace {
// What record_run_start remembered; empty dir: this process records nothing.
struct Record {
  std::string dir, run_id, program, started, last_checkpoint;
};
Record& record() {
  static Record r;
  return r;
}

void write_record(const std::string& state, int status, const std::string& why, const ExitMeaning* m) {
  const Record& r = record();
  if (r.dir.empty()) return;
  const LockHolder me = this_process();
  nlohmann::json j = {{"state", state},         {"program", r.program}, {"run_id", r.run_id},
                      {"host", me.host},        {"pid", me.pid},        {"started", r.started},
                      {"last_checkpoint", r.last_checkpoint}};
  if (m) {
    j["exit_status"] = status;
    j["why"] = why.substr(0, why.find('\n'));  // the first line: the rest is advice the log already holds
    j["retry"] = m->retry;
    j["advice"] = m->advice;
    j["ended"] = utc_timestamp();
  }
  namespace fs = std::filesystem;
  const fs::path path = fs::path(r.dir) / "run_status.json";
  const fs::path tmp = fs::path(r.dir) / (".run_status.json.tmp." + std::to_string(::getpid()));
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "%s: note: could not write '%s' (how this run ended is not recorded there)\n",
                   r.program.c_str(), path.c_str());
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic: a reader sees the old record or the new one
  if (ec) fs::remove(tmp, ec);
}
}  // namespace

const std::vector<ExitMeaning>& exit_statuses() {
  static const std::vector<ExitMeaning> table{
      {kExitCompleted, "completed", "completed", false, "nothing to do: the run is complete"},
      {kExitFailure, "failed", "failed at run time (a crash, a lost rank, an I/O error, a hung collective)", true,
       "retry: rerun the same command with --resume auto (read the error first if it repeats)"},
      {kExitUsage, "usage", "usage error (a flag, --config, or a checkpoint folder that refuses the run)", false,
       "do not retry: fix the command line"},
      {kExitNonFinite, "nonfinite", "stopped on a non-finite loss, gradient or weight", false,
       "do not retry as is: a rerun stops at the same step; change --lr, --amp or --clip-grad-norm"},
      {kExitData, "data", "data or input error (the data set, a vocabulary, a damaged checkpoint)", false,
       "do not retry: fix or replace the named file or folder"},
      {kExitPreempted, "preempted", "preempted: a stop signal, with a checkpoint at the step boundary", true,
       "retry: rerun the same command with --resume auto"},
  };
  return table;
}

const ExitMeaning& exit_meaning(int status) {
  for (const ExitMeaning& m : exit_statuses())
    if (m.status == status) return m;
  return exit_statuses()[1];
}

std::string exit_status_help() {
  std::string s = "Exit status:";
  for (const ExitMeaning& m : exit_statuses())
    s += std::string(m.status == 0 ? " " : "; ") + std::to_string(m.status) + " " + m.what;
  return s + ". The checkpoint folder records how the last run ended (run_status.json); "
             "'python3 apps/scripts/run_status.py DIR' says what to do.";
}

void record_run_start(const std::string& dir, const std::string& run_id, const std::string& program) {
  record() = {dir, run_id, program, utc_timestamp(), ""};
  write_record("running", 0, "", nullptr);
}

void record_checkpoint(const std::string& path) { record().last_checkpoint = path; }

void record_run_end(int status, const std::string& why) {
  const ExitMeaning& m = exit_meaning(status);
  write_record(m.state, status, why, &m);
  record().dir.clear();  // once
}

}  // namespace tandem::trainer
