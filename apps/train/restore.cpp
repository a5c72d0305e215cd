// apps/train/restore.cpp: restoring train_imagenet's checkpoints (see restore.h).
#include "apps/train/restore.h"

#include <algorithm>

#include "apps/trainer/run/run_flags.h"   // defines: folder_options
#include "apps/trainer/run/run_folder.h"  // defines: UsageError, read_resume_checkpoint

namespace tandem::apps {

CheckpointDirOptions folder_options(const TrainOptions& o) {
  return trainer::folder_options(o, CheckpointNaming::epoch, "train_imagenet");
}

namespace {

// "train/ has 'cat', 'dog' where the checkpoint has 'cat', 'cow'": the first differences, by label.
std::string class_difference(const std::vector<std::string>& have, const std::vector<std::string>& saved) {
  std::string s;
  int shown = 0;
  for (size_t i = 0; i < std::max(have.size(), saved.size()) && shown < 4; ++i) {
    const std::string a = i < have.size() ? "'" + have[i] + "'" : "nothing", b = i < saved.size() ? "'" + saved[i] + "'" : "nothing";
    if (a == b) continue;
    s += std::string(shown++ ? "; " : "") + "label " + std::to_string(i) + " is " + a + " in train/ but " + b +
         " in the checkpoint";
  }
  return s;
}

}  // namespace

Restored restore_checkpoint(const std::string& path, Module& model, const TrainOptions& o, const dist::World& w,
                            const std::vector<std::string>& classes) {
  // The header first: a wrong --model or class list is named before any tensor is read.
  const TrainState head = read_train_state(path);
  trainer::check_resume_header(path, head, o.model, o.optimizer);
  if (!head.classes.empty() && !classes.empty() && head.classes != classes)
    throw trainer::UsageError("checkpoint '" + path + "' was trained on " + std::to_string(head.classes.size()) +
                              " classes that train/ does not match (" + class_difference(classes, head.classes) +
                              "); resuming would shift labels. Resume with the --data it was trained on, or start a "
                              "new run");
  Checkpoint ck = apply_checkpoint(trainer::read_resume_checkpoint(path, w.rank == 0), path, model);
  return Restored{ck.state, std::move(ck.optimizer)};
}

}  // namespace tandem::apps
