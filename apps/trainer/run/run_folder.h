// apps/trainer/run/run_folder.h: the checkpoint folder a run owns, opened once for all ranks.
//
// Rank 0 opens a CheckpointDir (checkpoint/checkpoint_dir.h) at start-up, before the first step and,
// where the trainer can, before its data set-up: the folder is created, a write is tried, the lock
// taken, dead writers' temporaries removed, a fresh start into another run's folder refused unless
// overwrite is set, and --resume auto's file chosen. The other ranks learn the outcome in one
// collective (an all-gather of a short JSON record over the CPU communicator): the run id and the
// checkpoint to resume from, or the refusal. A refusal throws UsageError on every rank, so every
// rank stops (the trainers exit 2, a usage error; rank 0 prints the message) and none is left
// waiting in a collective. Rank 0 keeps the CheckpointDir (and its lock) for the whole run and
// writes every checkpoint through it: it stamps the run id, names epoch-end and mid-epoch files
// apart and prunes only this run's older files.
// Without a folder (no --checkpoint-dir) nothing is opened or locked; a --resume FILE is then read
// as it is, and --resume auto is refused by the trainers' option checks.
// Reading a folder without owning it (--evaluate, which may run beside a training job):
// resolve_resume_read_only picks --resume auto's file by the same rule, without the lock.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/transport/bootstrap.h"  // defines: World
#include "checkpoint/checkpoint_dir.h"     // defines: CheckpointDir, CheckpointDirOptions

namespace tandem::trainer {

// Thrown on every rank when the command line asks for something the folder refuses (another run's
// files, a lock held by another job, a run id that does not fit): the trainers exit 2. what() is
// the message, printed by rank 0 only (the others carry the same text).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RunFolder {
 public:
  RunFolder() = default;  // no folder: nothing is written
  // Collective over the world's CPU communicator. `o.dir` empty: no folder (resume_path is
  // o.resume as given). Rank 0 prints the CheckpointDir's notes (stale lock taken over,
  // temporaries removed, --resume auto found nothing), one line each, prefixed by `program`.
  static RunFolder open(const CheckpointDirOptions& o, const dist::World& w, const std::string& program);

  bool owned() const { return !dir_name_.empty(); }  // a folder was opened (on every rank)
  const std::string& dir() const { return dir_name_; }
  const std::string& run_id() const { return run_id_; }          // "" without a folder
  const std::string& resume_path() const { return resume_path_; }  // "" : fresh start
  // Rank 0: writes `s` (its run id set to this run's), prunes this run's older files, prints
  // "checkpoint: <path>" and returns the path. Other ranks: nothing, "". Needs owned().
  std::string write(const Module& model, const NamedTensors& optimizer_state, const TrainState& s);
  // At start-up, before the first step: rank 0 reserves `bytes` in the folder for a moment
  // (checkpoint/checkpoint_dir.h's reserve_space), so a disk without room for one checkpoint stops the
  // job now, not at the first save. A failure throws UsageError on every rank. Collective; nothing
  // without a folder.
  void reserve(uint64_t bytes, const dist::World& w) const;

 private:
  std::optional<CheckpointDir> dir_;  // rank 0 only
  std::string dir_name_, run_id_, resume_path_;
};

// What one checkpoint of `model` takes, for RunFolder::reserve: the resumed file's size when there
// is one (the same model and optimizer write the same size), else the parameters' bytes times
// (1 + the optimizer's state per parameter: SGD 1, AdamW and LAMB 2) plus f32 masters under --amp.
uint64_t checkpoint_size_estimate(const Module* model, const std::string& optimizer, bool amp,
                                  const std::string& resume);

// The checkpoint to resume from, read whole (checkpoint/checkpoint.h checks its size and digests): a
// damaged file throws InputError (exit 65), not a usage error. A file written before digests
// existed loads unverified, which `say` (rank 0) prints once.
Checkpoint read_resume_checkpoint(const std::string& path, bool say);

// The resumed checkpoint's header (read_train_state) against this run's --model and --optimizer,
// before any tensor is read: a UsageError naming the flag to change (another optimizer's state does
// not carry over; its weights do, through --weights).
void check_resume_header(const std::string& path, const TrainState& head, const std::string& model,
                         const std::string& optimizer);

// --resume as a file for a run that only reads the folder: "auto" is chosen by checkpoint_dir.h's
// rule (the run named by `run_id`, else the folder's last run as its lock records it, else the one
// run whose files are there) without taking the lock; anything else is returned as it is.
// Collective (rank 0 decides); throws UsageError on every rank when the rule refuses. "" when auto
// finds nothing.
// `hold` (rank 0): the chosen file is held for reading (checkpoint/checkpoint_dir.h's ReadHold) until
// the caller drops it, so a training job that prunes the folder leaves it alone meanwhile.
std::string resolve_resume_read_only(const std::string& dir, const std::string& resume, const std::string& run_id,
                                     const dist::World& w, ReadHold* hold = nullptr);

}  // namespace tandem::trainer
