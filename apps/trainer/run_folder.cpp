// apps/trainer/run_folder.cpp: the checkpoint folder opened on rank 0 and shared with every rank
// (see run_folder.h).
#include "apps/trainer/run_folder.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/check.h"  // defines: Error

namespace tandem::trainer {

namespace {

using json = nlohmann::json;

// Rank 0's record, the same on every rank afterwards: {"error": ...} or the fields asked for.
json share(const json& mine, const dist::World& w) {
  const std::vector<std::string> all = dist::all_gather_strings(w.rank == 0 ? mine.dump() : std::string());
  return json::parse(all.at(0));
}

}  // namespace

RunFolder RunFolder::open(const CheckpointDirOptions& o, const dist::World& w, const std::string& program) {
  RunFolder f;
  if (o.dir.empty()) {
    f.resume_path_ = o.resume;
    return f;
  }
  json mine;
  if (w.rank == 0) {
    try {
      f.dir_.emplace(CheckpointDir::open(o));
      mine = {{"run_id", f.dir_->run_id()}, {"resume", f.dir_->resume_path()}};
      for (const std::string& n : f.dir_->notes()) std::printf("%s: %s\n", program.c_str(), n.c_str());
      std::fflush(stdout);
    } catch (const Error& e) {
      mine = {{"error", e.what()}};
    }
  }
  const json r = share(mine, w);
  if (r.contains("error")) {
    f.dir_.reset();  // lets go of the lock, if it was taken
    throw UsageError(r["error"].get<std::string>());
  }
  f.dir_name_ = o.dir;
  f.run_id_ = r["run_id"].get<std::string>();
  f.resume_path_ = r["resume"].get<std::string>();
  return f;
}

std::string RunFolder::write(const Module& model, const NamedTensors& optimizer_state, const TrainState& s) {
  TANDEM_CHECK(owned(), "RunFolder::write without a checkpoint folder");
  if (!dir_) return "";  // not the writing rank
  const std::string path = dir_->write(model, optimizer_state, s);
  std::printf("checkpoint: %s\n", path.c_str());
  std::fflush(stdout);
  return path;
}

std::string resolve_resume_read_only(const std::string& dir, const std::string& resume, const std::string& run_id,
                                     const dist::World& w) {
  if (resume != "auto") return resume;
  json mine;
  if (w.rank == 0) {
    try {
      const std::optional<LockHolder> lock = read_lock_record(dir);
      const ResumeChoice c = choose_resume_auto(dir, list_checkpoints(dir), run_id, lock ? lock->last_run : "");
      mine = {{"resume", c.path}};
    } catch (const Error& e) {
      mine = {{"error", e.what()}};
    }
  }
  const json r = share(mine, w);
  if (r.contains("error")) throw UsageError(r["error"].get<std::string>());
  return r["resume"].get<std::string>();
}

}  // namespace tandem::trainer
