// checkpoint/checkpoint_lock.h: one job per checkpoint folder - an exclusive lock on "<dir>/.lock"
// (flock plus a JSON record naming the holder), taken at start-up and held for the run; a second job
// is refused, naming the first. What it guarantees on which filesystems: checkpoint/README.md, "The lock".
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tandem {

// How long acquire() waits for the flock of a holder that is being killed: its exit closes its files
// within milliseconds on an idle machine; 10 s covers a loaded one (a trainer unmapping GiBs).
inline constexpr int kDyingHolderWaitS = 10;

// True when a /proc/<pid>/status text shows SIGKILL pending (SigPnd or ShdPnd): the process is dying.
bool sigkill_pending(const std::string& proc_status);

// What "<dir>/.lock" records about its holder.
struct LockHolder {
  std::string host;          // gethostname()
  int64_t pid = 0;
  std::string program;       // e.g. "train_imagenet" (FolderLockOptions::program)
  std::string run_id;        // the holder's run ("" while it starts and has not chosen one)
  std::string since;         // when it took the lock, UTC ISO 8601
  std::string boot_id;       // /proc/sys/kernel/random/boot_id ("" where unavailable)
  int64_t start_ticks = -1;  // the process's start time, field 22 of /proc/<pid>/stat (-1: unknown)
  std::string last_run;      // the run that owns the folder's checkpoints ("" when none yet)
  bool released = false;     // the holder ended and let go cleanly

  // "pid 123 on host node7 (train_imagenet, run 3f2a..., since 2026-11-25T10:00:00.000000Z)"
  std::string describe() const;
};

struct FolderLockOptions {
  std::string program;     // written into the record; shown to a job that is refused
  std::string run_id;      // the holder's run id if known now ("" : set later with set_run_id)
  bool use_flock = true;   // false: the record alone decides (filesystems whose flock is per machine)
};

// Holds "<dir>/.lock" until destroyed or released. Move-only.
class FolderLock {
 public:
  FolderLock() = default;  // holds nothing
  // Takes the lock or throws a tandem::Error naming the holder. `dir` must exist.
  static FolderLock acquire(const std::string& dir, const FolderLockOptions& opt = {});
  FolderLock(FolderLock&& o) noexcept;
  FolderLock& operator=(FolderLock&& o) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

  bool held() const { return fd_ >= 0; }
  // Lines for the log: a stale lock taken over, flock unsupported. Empty when nothing happened.
  const std::vector<std::string>& notes() const { return notes_; }
  // The record found at acquire time (nullopt: none): previous()->last_run is the folder's run.
  const std::optional<LockHolder>& previous() const { return previous_; }
  // The holder's record as written now.
  const LockHolder& record() const { return me_; }
  // The run now owning the folder: recorded as run_id and last_run.
  void set_run_id(const std::string& run_id);
  // Marks the record released and lets go. Called by the destructor; safe to call twice.
  void release();

 private:
  void write_record();
  int fd_ = -1;
  std::string path_;
  LockHolder me_;
  std::optional<LockHolder> previous_;
  std::vector<std::string> notes_;
};

// The record in "<dir>/.lock" without taking the lock (nullopt when absent, empty or unreadable).
std::optional<LockHolder> read_lock_record(const std::string& dir);
// This process's host name, boot id and start time, as acquire() records them.
LockHolder this_process();
// Whether `h` is a live process on this machine: same host and boot, pid present and not a zombie, same start time
// (when both are known). False for another host (use same_machine first to tell the cases apart).
bool holder_alive(const LockHolder& h);
bool same_machine(const LockHolder& h);

}  // namespace tandem
