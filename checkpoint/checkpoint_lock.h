// layers/checkpoint_lock.h: one job per checkpoint folder - an exclusive lock on "<dir>/.lock".
//
// The writing rank takes the lock at start-up (layers/checkpoint_dir.h does) and holds it for the
// whole run. A second job on the same folder is refused with a message that names the first (host,
// pid, program, run, since when) and says what to do; two jobs writing one folder would otherwise
// interleave their checkpoints and prune each other's.
//
// How: flock(LOCK_EX | LOCK_NB) on "<dir>/.lock", plus a JSON record in that file naming the holder
// ({"host", "pid", "program", "run_id", "since", "boot_id", "start_ticks", "last_run", "released"}).
// The file is never deleted (deleting a lock file races with a job that has just opened it); a
// clean release rewrites the record with "released": true.
//   - The kernel drops a flock when its holder dies, however it dies, so a job killed with SIGKILL
//     leaves a record with "released": false but no lock. The next job gets the lock and says, in a
//     note, whose lock it took over (a "stale" lock).
//   - The record also decides where flock cannot: a holder on this host (same host name and boot id)
//     whose process is alive - pid present, not a zombie (an exited process its parent has not
//     reaped yet, state Z: it holds nothing), and, on Linux, the same start time in
//     /proc/<pid>/stat, so a reused pid does not count - is never taken over, even when flock succeeds.
//   - A holder on this host with SIGKILL pending (/proc/<pid>/status) is dying: it runs no more code
//     but holds flock until its exit closes its files. A job that finds one waits up to
//     kDyingHolderWaitS for that flock instead of refusing (a restart right after kill -9).
//   - flock unsupported (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL: e.g. Lustre mounted "noflock", some NFS
//     set-ups) or FolderLockOptions::use_flock = false: the record alone decides. A live holder on
//     this host, or any unreleased holder on another host (its liveness cannot be checked from
//     here), refuses; a dead holder on this host is taken over with a note.
// What is guaranteed, and what is not:
//   - Local filesystems (ext4, XFS, tmpfs): exclusive, for jobs on this machine.
//   - NFSv4 and NFSv3 with lockd: Linux maps flock to byte-range locks that the server arbitrates,
//     so the lock holds across machines. A client that loses its lease (network partition) loses
//     the lock without being told.
//   - Lustre with "-o flock": across machines. With "-o localflock" the lock is per machine: a job
//     on another machine gets it too. The record then still names the other holder, so the second
//     job takes over with a note that says it may still be running; it cannot tell. Use
//     use_flock = false on such mounts to refuse instead.
//   - Two jobs that start within the same moment with flock unsupported may both pass (the record
//     is read, then written; there is no atomic test-and-set without a lock).
// "last_run" records the run that owns the folder's checkpoints (the last one that committed to it,
// set_run_id); a job that is refused or fails before committing carries the previous value forward.
// checkpoint_dir.h's --resume auto follows it.
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
