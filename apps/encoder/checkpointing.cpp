// apps/encoder/checkpointing.cpp: step-numbered checkpoints, resume and pruning (see checkpointing.h).
#include "apps/encoder/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <vector>

#include "apps/encoder/setup.h"  // defines: Training
#include "apps/trainer/position.h"  // defines: Position, train_state, resume_position

namespace tandem::apps::encoder {

namespace fs = std::filesystem;

std::string step_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("checkpoint_step" + std::to_string(step) + ".safetensors")).string();
}

namespace {
// (step, path) of the checkpoints in dir, newest first.
std::vector<std::pair<int64_t, std::string>> list_step_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex re(R"(checkpoint_step(\d+)\.safetensors)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, re)) out.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}
}  // namespace

std::string latest_step_checkpoint(const std::string& dir) {
  auto all = list_step_checkpoints(dir);
  return all.empty() ? "" : all.front().second;
}

std::string resume_path(const EncoderOptions& o) {
  return o.resume == "auto" ? latest_step_checkpoint(o.checkpoint_dir) : o.resume;
}

Restored restore_checkpoint(const std::string& path, Module& model, const EncoderOptions& o, const dist::World& w) {
  Checkpoint ck = load_checkpoint(path, model);
  Restored r{ck.state, std::move(ck.optimizer)};
  const TrainState& s = r.state;
  TANDEM_CHECK(s.model == o.model, "checkpoint '", path, "' holds a ", s.model, " but --model is ", o.model,
               ": pass --model ", s.model, " or start without --resume");
  TANDEM_CHECK(s.index_in_epoch == 0 || s.world_size == w.size, "checkpoint '", path, "' was written inside an "
               "epoch by ", s.world_size, " ranks; resume it with mpiexec -n ", s.world_size);
  if (auto it = s.extra.find("optimizer"); it != s.extra.end())
    TANDEM_CHECK(it->second == o.optimizer, "checkpoint '", path, "' was trained with --optimizer ", it->second,
                 ": resume with the same optimizer (its state does not carry over)");
  if (auto it = s.extra.find("batch_per_rank"); it != s.extra.end() && s.index_in_epoch != 0)
    TANDEM_CHECK(it->second == std::to_string(o.batch), "checkpoint '", path, "' was written inside an epoch with "
                 "--batch ", it->second, ": resume with the same --batch");
  const trainer::Position at = trainer::resume_position(s);  // restores the default generator (dropout)
  if (w.rank == 0) std::printf("resumed from %s at step %lld\n", path.c_str(), (long long)at.step);
  return r;
}

bool checkpoint_if_due(const Training& t, const EncoderOptions& o, int64_t step, int64_t epoch,
                       int64_t index_in_epoch, bool last) {
  const bool due = last || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
  if (o.checkpoint_dir.empty() || !due) return false;
  TrainState s = trainer::train_state(trainer::Position{step, epoch, index_in_epoch}, t.world->size, o.model);
  s.extra["optimizer"] = o.optimizer;
  s.extra["total_steps"] = std::to_string(o.steps);
  s.extra["base_lr"] = std::to_string(t.sched.base_lr);
  s.extra["batch_per_rank"] = std::to_string(o.batch);
  s.extra["seq_len"] = std::to_string(o.seq_len);
  s.extra["vocab_size"] = std::to_string(t.corpus.vocab_size);
  s.extra["amp"] = o.amp;
  // The optimizer state and --amp's f32 masters and loss scale, unsharded (apps/trainer/step.h);
  // under ZeRO every rank takes part in assembling it, and rank 0 receives it. --zero 3: the
  // weights are gathered whole for the write (every rank), and freed again after it.
  const dist::FullParameters weights = t.step->full_parameters();
  const NamedTensors opt_state = t.step->state();
  if (t.world->rank == 0) {
    fs::create_directories(o.checkpoint_dir);
    const std::string path = step_checkpoint_path(o.checkpoint_dir, step);
    save_checkpoint(path, *t.model, opt_state, s);
    std::printf("checkpoint: %s\n", path.c_str());
    auto all = list_step_checkpoints(o.checkpoint_dir);
    for (size_t i = static_cast<size_t>(o.keep_checkpoints); o.keep_checkpoints > 0 && i < all.size(); ++i) {
      std::error_code ec;
      fs::remove(all[i].second, ec);
    }
  }
  return true;
}

}  // namespace tandem::apps::encoder
