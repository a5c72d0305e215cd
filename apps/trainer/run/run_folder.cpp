// apps/trainer/run/run_folder.cpp: the checkpoint folder opened on rank 0 and shared with every rank
// (see run_folder.h).
#include "apps/trainer/run/run_folder.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/trainer/run/exit_status.h"  // defines: record_run_start, record_checkpoint
#include "apps/trainer/run/flag_words.h"   // defines: flag_words
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
      for (const std::string& n : f.dir_->notes())
        std::printf("%s: %s\n", program.c_str(), flag_words(n).c_str());
      std::fflush(stdout);
      record_run_start(o.dir, f.dir_->run_id(), program);  // the folder is this run's now: run_status.json
    } catch (const CheckpointDamaged& e) {
      mine = {{"error", flag_words(e.what())}, {"data", true}};
    } catch (const Error& e) {
      mine = {{"error", flag_words(e.what())}};
    }
  }
  const json r = share(mine, w);
  if (r.contains("error")) {
    f.dir_.reset();  // lets go of the lock, if it was taken
    // A damaged file is a data error (exit 65); the rest are refusals of the command line (exit 2).
    if (r.value("data", false)) throw InputError(r["error"].get<std::string>(), /*every_rank=*/true);
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
  record_checkpoint(path);
  std::printf("checkpoint: %s\n", path.c_str());
  std::fflush(stdout);
  return path;
}

void RunFolder::reserve(uint64_t bytes, const dist::World& w) const {
  if (!owned()) return;
  json mine;
  if (dir_) {
    try {
      reserve_space(dir_name_, bytes);
    } catch (const Error& e) {
      mine = {{"error", flag_words(e.what())}};
    }
  }
  const json r = share(mine, w);
  if (r.contains("error")) throw UsageError(r["error"].get<std::string>());
}

uint64_t checkpoint_size_estimate(const Module* model, const std::string& optimizer, bool amp,
                                  const std::string& resume) {
  std::error_code ec;
  if (!resume.empty())
    if (const uint64_t size = std::filesystem::file_size(resume, ec); !ec) return size;
  if (!model) return 0;
  uint64_t params = 0, f32 = 0;
  for (const auto& [name, p] : model->named_parameters()) params += p.nbytes(), f32 += 4 * p.numel();
  const uint64_t slots = optimizer == "sgd" ? 1 : 2;
  return params + slots * f32 + (amp ? f32 : 0);
}

void check_resume_header(const std::string& path, const TrainState& head, const std::string& model,
                         const std::string& optimizer) {
  if (head.model != model)
    throw UsageError("checkpoint '" + path + "' holds a " + head.model + " but --model is " + model +
                     ": pass --model " + head.model + " or start without --resume");
  // Said in the flag's words, not the state's keys.
  if (auto it = head.extra.find("optimizer"); it != head.extra.end() && it->second != optimizer)
    throw UsageError("checkpoint '" + path + "' was trained with --optimizer " + it->second +
                     " but this run asks for --optimizer " + optimizer + ": resume with --optimizer " + it->second +
                     " (its state does not carry over), or start a new run from its weights with --weights");
}

Checkpoint read_resume_checkpoint(const std::string& path, bool say) {
  Checkpoint c;
  try {
    c = read_checkpoint(path);
  } catch (const Error& e) {
    throw InputError(flag_words(e.what()));
  }
  if (say && !c.verified) {
    std::printf("resume: '%s' carries no digests (written before tandem added them): its contents are loaded "
                "unchecked\n", path.c_str());
    std::fflush(stdout);
  }
  return c;
}

std::string resolve_resume_read_only(const std::string& dir, const std::string& resume, const std::string& run_id,
                                     const dist::World& w, ReadHold* hold) {
  if (resume != "auto") return resume;
  json mine;
  if (w.rank == 0) {
    try {
      const std::optional<LockHolder> lock = read_lock_record(dir);
      // A training job beside us may prune the file between the choice and the read: hold it (its
      // pruning then leaves it), and choose again when it went before we could (a few rounds: each
      // needs the trainer to write a whole checkpoint in between).
      std::string path;
      for (int round = 0; round < 5; ++round) {
        const ResumeChoice c = choose_resume_auto(dir, list_checkpoints(dir), run_id, lock ? lock->last_run : "");
        path = c.path;
        if (path.empty() || !hold) break;
        *hold = ReadHold::take(path);
        if (hold->held()) break;
      }
      mine = {{"resume", path}};
    } catch (const Error& e) {
      mine = {{"error", flag_words(e.what())}};
    }
  }
  const json r = share(mine, w);
  if (r.contains("error")) throw UsageError(r["error"].get<std::string>());
  return r["resume"].get<std::string>();
}

}  // namespace tandem::trainer
