// checkpoint/checkpoint_lock.cpp: the checkpoint folder's lock. See checkpoint_lock.h.
#include "checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "checkpoint/checkpoint.h"  // defines: utc_timestamp

namespace tandem {

namespace {
using json = nlohmann::json;

std::string host_name() {
  char h[256] = {};
  return ::gethostname(h, sizeof h - 1) == 0 ? std::string(h) : std::string("unknown-host");
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// The fields of /proc/<pid>/stat after the command name (field 3, the state, first). The name,
// field 2, is in parentheses and may hold spaces and ')', so fields are counted from the last ')'.
// Empty when the file cannot be read (no /proc, or no such process).
std::string stat_after_name(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t close = line.rfind(')');
  return close == std::string::npos ? "" : line.substr(close + 1);
}

// A process that has exited but not been reaped by its parent yet (state Z, zombie; X, dead) holds
// no files and no locks, yet kill(pid, 0) still finds it. After kill -9 of a job, its rank 0 stays
// a zombie until the launcher reaps it - seconds, and 90 s was seen (issue 29, item 2).
bool exited(int64_t pid) {
  std::istringstream rest(stat_after_name(pid));
  char state = 0;
  return (rest >> state) && (state == 'Z' || state == 'X');
}

// True when SIGKILL is pending for `pid` (its /proc/<pid>/status says so): the process is being
// killed - it runs no more user code, but until its exit has closed its files it still holds flock.
bool being_killed(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::stringstream text;
  text << in.rdbuf();
  return sigkill_pending(text.str());
}

// Field 22 of /proc/<pid>/stat (clock ticks after boot).
int64_t start_ticks(int64_t pid) {
  std::istringstream rest(stat_after_name(pid));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return -1;
  try {
    return std::stoll(field);
  } catch (...) {
    return -1;
  }
}

std::optional<LockHolder> parse_record(const std::string& text) {
  if (text.find_first_not_of(" \n\t\r") == std::string::npos) return std::nullopt;
  try {
    const json j = json::parse(text);
    LockHolder h;
    h.host = j.value("host", "");
    h.pid = j.value("pid", int64_t{0});
    h.program = j.value("program", "");
    h.run_id = j.value("run_id", "");
    h.since = j.value("since", "");
    h.boot_id = j.value("boot_id", "");
    h.start_ticks = j.value("start_ticks", int64_t{-1});
    h.last_run = j.value("last_run", "");
    h.released = j.value("released", false);
    return h;
  } catch (const json::exception&) {
    return std::nullopt;  // a damaged record: no holder can be named, flock still decides
  }
}

std::string read_fd(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// errno values with which flock says "not on this filesystem" rather than "held".
bool flock_unsupported(int e) { return e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL; }

[[noreturn]] void refuse(const std::string& dir, const LockHolder& h, const std::string& why) {
  TANDEM_THROW("checkpoint folder '", dir, "' is in use by another job: ", h.describe(), why,
               ". Two jobs writing one folder interleave their checkpoints and prune each other's. Wait for that "
               "job to end, stop it, or give this job another [dir].");
}
}  // namespace

std::string LockHolder::describe() const {
  std::string s = "pid " + std::to_string(pid) + " on host " + (host.empty() ? "?" : host) + " (";
  if (!program.empty()) s += program + ", ";
  s += run_id.empty() ? "run not chosen yet" : "run " + run_id;
  if (!since.empty()) s += ", since " + since;
  return s + ")";
}

LockHolder this_process() {
  LockHolder h;
  h.host = host_name();
  h.pid = ::getpid();
  h.boot_id = boot_id();
  h.start_ticks = start_ticks(h.pid);
  return h;
}

bool same_machine(const LockHolder& h) { return h.host == host_name(); }

bool sigkill_pending(const std::string& proc_status) {
  // "SigPnd:" (the thread's) and "ShdPnd:" (the process's) are hex masks; signal n is bit n - 1.
  for (const char* field : {"SigPnd:", "ShdPnd:"}) {
    const size_t at = proc_status.find(field);
    if (at == std::string::npos) continue;
    try {
      const unsigned long long mask = std::stoull(proc_status.substr(at + std::strlen(field)), nullptr, 16);
      if (mask & (1ull << (SIGKILL - 1))) return true;
    } catch (...) {
    }
  }
  return false;
}

bool holder_alive(const LockHolder& h) {
  if (!same_machine(h) || h.pid <= 0) return false;
  const std::string boot = boot_id();
  if (!h.boot_id.empty() && !boot.empty() && h.boot_id != boot) return false;  // the machine rebooted since
  if (::kill(static_cast<pid_t>(h.pid), 0) != 0 && errno != EPERM) return false;  // ESRCH: no such process
  if (exited(h.pid)) return false;  // a zombie: dead, its lock gone, only not reaped yet
  if (being_killed(h.pid)) return false;  // SIGKILL pending: it writes nothing more
  const int64_t ticks = start_ticks(h.pid);
  return h.start_ticks < 0 || ticks < 0 || ticks == h.start_ticks;  // a different start time: the pid was reused
}

std::optional<LockHolder> read_lock_record(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text = read_fd(fd);
  ::close(fd);
  return parse_record(text);
}

FolderLock FolderLock::acquire(const std::string& dir, const FolderLockOptions& opt) {
  FolderLock l;
  l.path_ = (std::filesystem::path(dir) / ".lock").string();
  const int fd = ::open(l.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TANDEM_CHECK(fd >= 0, "cannot open the lock file '", l.path_, "': ", std::strerror(errno),
               ". The checkpoint folder must be writable; choose another [dir] or fix its permissions.");
  l.fd_ = fd;  // from here on the destructor closes it (and, when the record was never written, leaves it)
  bool locked = false;
  if (opt.use_flock) {
    int e = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
    if (e == EWOULDBLOCK) {
      // A holder on this machine that is being killed (a supervisor's kill -9, then a restart at
      // once) still holds flock until its exit closes its files - milliseconds for a trainer, more
      // under load: wait for that rather than refuse a restart that is about to be valid.
      const auto h = parse_record(read_fd(fd));
      if (h && same_machine(*h) && h->pid > 0 && being_killed(h->pid))
        for (int waited_ms = 0; e == EWOULDBLOCK && waited_ms < kDyingHolderWaitS * 1000; waited_ms += 20) {
          ::usleep(20 * 1000);
          e = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
        }
    }
    if (e == 0) {
      locked = true;
    } else if (e == EWOULDBLOCK) {
      const auto h = parse_record(read_fd(fd));
      ::close(fd), l.fd_ = -1;
      if (h) refuse(dir, *h, "");
      TANDEM_THROW("checkpoint folder '", dir, "' is in use by another job, which holds '", l.path_,
                   "' but has not written who it is yet. Wait for that job to end, stop it, or give this job "
                   "another [dir].");
    } else if (flock_unsupported(e)) {
      l.notes_.push_back("checkpoint lock: flock is not supported on the filesystem of '" + dir + "' (" +
                         std::strerror(e) + "); the lock relies on its record alone (checkpoint/checkpoint_lock.h)");
    } else {
      ::close(fd), l.fd_ = -1;
      TANDEM_THROW("flock on '", l.path_, "' failed: ", std::strerror(e),
                   ". Check the checkpoint folder's filesystem.");
    }
  }
  // Read after flock: once we hold it, no live flock-using holder can rewrite the record under us.
  l.previous_ = parse_record(read_fd(fd));
  if (l.previous_ && !l.previous_->released) {
    const LockHolder& p = *l.previous_;
    if (holder_alive(p)) {
      ::close(fd), l.fd_ = -1;
      refuse(dir, p, locked ? " - flock was granted, yet that process is alive on this machine, so this filesystem's "
                              "flock does not exclude it"
                            : "");
    }
    if (same_machine(p)) {
      l.notes_.push_back("checkpoint lock: took over the stale lock of " + p.describe() +
                         ": that process is gone (killed or crashed) and never released it");
    } else if (locked) {
      l.notes_.push_back("checkpoint lock: took over the lock of " + p.describe() +
                         ", which never released it; flock says it is gone. If that job still runs (a filesystem "
                         "whose flock is per machine, e.g. Lustre localflock), stop one of the two jobs");
    } else {
      ::close(fd), l.fd_ = -1;
      refuse(dir, p, " - a process on another machine cannot be checked without flock. If that job has ended, "
                     "delete '" + l.path_ + "' and start again; otherwise");
    }
  }
  l.me_ = this_process();
  l.me_.program = opt.program;
  l.me_.run_id = opt.run_id;
  l.me_.since = utc_timestamp();
  l.me_.last_run = l.previous_ ? l.previous_->last_run : "";
  l.write_record();
  return l;
}

void FolderLock::write_record() {
  json j = {{"host", me_.host},       {"pid", me_.pid},         {"program", me_.program},
            {"run_id", me_.run_id},   {"since", me_.since},     {"boot_id", me_.boot_id},
            {"start_ticks", me_.start_ticks}, {"last_run", me_.last_run}, {"released", me_.released}};
  const std::string text = j.dump() + "\n";
  TANDEM_CHECK(::ftruncate(fd_, 0) == 0, "cannot write the lock file '", path_, "': ", std::strerror(errno));
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::pwrite(fd_, text.data() + at, text.size() - at, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    TANDEM_CHECK(n > 0, "cannot write the lock file '", path_, "': ", std::strerror(errno),
                 ". Check that the disk is not full.");
    at += static_cast<size_t>(n);
  }
  ::fsync(fd_);  // a job on another machine reads this record: push it out of the page cache
}

void FolderLock::set_run_id(const std::string& run_id) {
  TANDEM_CHECK(held(), "set_run_id on a folder lock that is not held");
  me_.run_id = me_.last_run = run_id;
  write_record();
}

void FolderLock::release() {
  if (fd_ < 0) return;
  if (!me_.since.empty()) {  // the record is ours (acquire got that far): mark it released
    me_.released = true;
    try {
      write_record();
    } catch (const Error&) {
      // A full disk at exit: the record stays "unreleased", which the next job handles as stale.
    }
  }
  ::close(fd_);  // drops the flock
  fd_ = -1;
}

FolderLock::FolderLock(FolderLock&& o) noexcept { *this = std::move(o); }

FolderLock& FolderLock::operator=(FolderLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_, o.fd_ = -1;
    path_ = std::move(o.path_);
    me_ = std::move(o.me_);
    previous_ = std::move(o.previous_);
    notes_ = std::move(o.notes_);
  }
  return *this;
}

FolderLock::~FolderLock() { release(); }

}  // namespace tandem
