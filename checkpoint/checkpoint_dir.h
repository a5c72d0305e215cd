// checkpoint/checkpoint_dir.h: a checkpoint folder owned by its run - names, listing, the newest file
// of a run, pruning, the start-up checks, resume auto, and CheckpointDir, which does them in order.
// Only the writing rank (rank 0) calls it; messages name CheckpointDirOptions' fields in brackets
// ("[resume auto]"), never a program's flag. The rules and why: checkpoint/README.md, "The folder".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"  // defines: Error
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_lock.h"

namespace tandem {

// ---- names ----
// Epoch numbers in names count from 1: checkpoint_epoch3 ends the third epoch, checkpoint_epoch3_step70
// is inside it (TrainState::epoch is the 0-based index of the epoch the next step belongs to).
std::string checkpoint_path(const std::string& dir, int64_t epoch);                              // epoch end
std::string mid_epoch_checkpoint_path(const std::string& dir, int64_t epoch, int64_t step);
std::string step_checkpoint_path(const std::string& dir, int64_t step);                          // train_encoder
// "<dir>/<stem>.run-<run_id>.safetensors": the name a run writes when `path` is another run's file.
std::string run_path(const std::string& path, const std::string& run_id);
// `path` when it is free or run_id's own file; else run_path(path, run_id).
std::string own_name(const std::string& path, const std::string& run_id);
enum class CheckpointNaming { epoch, step };
// The name for `s`: step naming, or epoch naming - the epoch-end name when the state is at an epoch
// boundary (epoch_offset and index_in_epoch 0), the mid-epoch name otherwise.
std::string checkpoint_path_for(const std::string& dir, const TrainState& s, CheckpointNaming naming);
// checkpoint_*.safetensors (a file name, no folder).
bool is_checkpoint_name(const std::string& filename);

// ---- listing ----
struct CheckpointInfo {
  std::string path;
  bool readable = false;   // false: the header did not parse as a tandem checkpoint (`error` says why)
  std::string error;
  TrainState state;        // from the header; the tensors are not read. Valid when readable.
  std::string saved_at;    // state.saved_at, or the file's modification time when the file lacks it
};
// The checkpoint_*.safetensors files in dir (none when dir does not exist): readable ones newest
// first, then the unreadable ones by name.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);
// The newest readable checkpoint of run `run_id` ("" names the files without a run id), "" when none.
std::string latest_checkpoint(const std::string& dir, const std::string& run_id);
// Removes all but the `keep` newest of run_id's readable checkpoints (keep <= 0: keeps all).
// `just_written` is never removed and counts as one of the kept, and neither is a file a reader
// holds (ReadHold below): that one is left for a later round. Returns how many were removed.
int prune_checkpoints(const std::string& dir, int keep, const std::string& run_id, const std::string& just_written);

// A reader's claim on a checkpoint file: a shared flock on the file itself, held while the reader
// reads it (e.g. an evaluation beside a training job that prunes its older files). Pruning takes an
// exclusive one without waiting and leaves a held file alone. take() returns one that holds nothing
// when the file is gone (pruned between the choice and the open): choose again.
class ReadHold {
 public:
  ReadHold() = default;
  static ReadHold take(const std::string& path);
  ReadHold(ReadHold&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ReadHold& operator=(ReadHold&& o) noexcept;
  ReadHold(const ReadHold&) = delete;
  ReadHold& operator=(const ReadHold&) = delete;
  ~ReadHold();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// ---- start-up checks ----
// Creates dir and writes, fsyncs and removes a probe file in it; throws naming the path, the errno
// text and what to do. Returns whether dir existed before.
bool ensure_writable(const std::string& dir);
// Reserves `bytes` in dir for a moment - a probe file of that size allocated (posix_fallocate, so
// a full disk or a quota shows without writing the bytes), then removed - and throws, naming the
// size, the errno text and what to do, when there is no room. For the start-up check that one
// checkpoint fits: a disk with room for none used to train a whole epoch before failing, on every
// restart. Where the filesystem cannot allocate ahead, its free space (statvfs) decides.
void reserve_space(const std::string& dir, uint64_t bytes);
// Removes the temporaries of dead writers (checkpoint_*.tmp.* and probe temporaries; see
// safetensors::is_temp_name). Only call while holding the folder's lock and before this job writes
// into the folder (a write in flight has a temporary too). Returns the removed names.
std::vector<std::string> remove_dead_temporaries(const std::string& dir);
// "" when a fresh start into dir is fine; else the refusal: the files there, their runs, and what
// to do. `listing` is list_checkpoints(dir).
std::string fresh_start_refusal(const std::string& dir, const std::vector<CheckpointInfo>& listing);

// "" when resuming `resume` (a file of run `resume_run`) into dir is fine; else the refusal (see
// above). `folder_run` is the run the folder's lock record names as its last.
std::string foreign_resume_refusal(const std::string& dir, const std::vector<CheckpointInfo>& listing,
                                   const std::string& resume, const std::string& resume_run,
                                   const std::string& folder_run);

// resume auto's choice (see the rule above). Throws when rule 3 finds several runs.
struct ResumeChoice {
  std::string path;     // "" when nothing was found
  std::string run_id;   // the chosen file's run id
};
ResumeChoice choose_resume_auto(const std::string& dir, const std::vector<CheckpointInfo>& listing,
                                const std::string& run_id, const std::string& folder_run);
// Every checkpoint of the chosen run is damaged (truncated, or a tensor that fails its digest).
struct CheckpointDamaged : Error {
  using Error::Error;
};
// From c.path on (c.run_id's files, newest first), the newest file that reads whole and matches its
// digests; a note names the damaged ones skipped. Throws CheckpointDamaged when none is intact.
std::string newest_intact(const std::string& dir, const std::vector<CheckpointInfo>& listing, const ResumeChoice& c,
                          std::vector<std::string>& notes);
// The one line the apps print when resume auto finds nothing: names the folder (and that it did
// not exist, for a mistyped path), the run looked for and the other files left alone.
std::string resume_auto_found_nothing(const std::string& dir, bool dir_existed, const std::string& run_id,
                                      const std::vector<CheckpointInfo>& listing);

// ---- the folder, owned for one run ----
struct CheckpointDirOptions {
  std::string dir;               // required
  std::string resume;            // "": fresh start; "auto": see the rule above; else a checkpoint file
  std::string run_id;            // "": new (fresh start) or the resumed file's. Set: this run's id, and
                                 // resume auto looks for it (a requeue script that names its run)
  bool overwrite = false;        // allow a fresh start, or a resume of another run's file, into a folder
                                 // holding other checkpoints
  int keep = 0;                  // newest checkpoints of this run to keep (0: all)
  CheckpointNaming naming = CheckpointNaming::epoch;
  std::string program;           // names this job in the lock record (e.g. "train_imagenet")
  bool use_flock = true;         // see FolderLockOptions
};

class CheckpointDir {
 public:
  // Runs the start-up checks, takes the lock and decides fresh start or resume; throws on refusal.
  static CheckpointDir open(const CheckpointDirOptions& o);

  const std::string& dir() const { return o_.dir; }
  const std::string& run_id() const { return run_id_; }
  // The checkpoint to resume from ("" : fresh start).
  const std::string& resume_path() const { return resume_path_; }
  // Lines for the log: a stale lock taken over, temporaries removed, resume auto found nothing.
  const std::vector<std::string>& notes() const { return notes_; }

  // Writes the checkpoint for `s` (its run_id is set to this run's), then prunes this run's older
  // files. Returns the path written.
  std::string write(const Module& model, const NamedTensors& optimizer_state, TrainState s);

 private:
  CheckpointDirOptions o_;
  FolderLock lock_;
  std::string run_id_, resume_path_;
  std::vector<std::string> notes_;
};

}  // namespace tandem
