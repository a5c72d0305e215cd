// checkpoint/checkpoint_dir.cpp: a checkpoint folder owned by its run. See checkpoint_dir.h.
#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <regex>

#include "core/safetensors.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {
// The stem safetensors::temp_path is given for the writability probe: its leftovers are
// recognised like a checkpoint's temporaries.
const char* const kProbe = ".write_probe";
// How many files a refusal lists before "and N more": enough to see the runs, short enough to read.
constexpr size_t kListed = 8;

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

// The first sentence of a tandem::Error's message, without its "file:line: check failed (...): "
// prefix: a listing line says what is wrong; read_checkpoint on the file gives the whole advice.
std::string reason(const std::string& what) {
  const size_t check = what.find("check failed (");
  size_t start = check == std::string::npos ? std::string::npos : what.find("): ", check);
  if (start != std::string::npos) {
    start += 3;
  } else {
    start = what.find(": ");
    start = start == std::string::npos ? 0 : start + 2;
  }
  const size_t end = what.find(". ", start);
  return what.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
}

std::string mtime(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "";
  const auto t = std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                       std::chrono::nanoseconds(st.st_mtim.tv_nsec));
  return utc_timestamp(std::chrono::time_point_cast<std::chrono::system_clock::duration>(t));
}

std::string run_label(const std::string& run_id) { return run_id.empty() ? "(no run id)" : run_id; }

// "  checkpoint_epoch7.safetensors  run 3f2a...  step 700  saved 2026-..." for a listing.
std::string line_for(const CheckpointInfo& c) {
  std::string s = "  " + file_name(c.path);
  if (!c.readable) return s + "  unreadable: " + reason(c.error);
  return s + "  run " + run_label(c.state.run_id) + "  step " + std::to_string(c.state.step) + "  saved " + c.saved_at;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

// Writes all of `n` bytes to fd or returns false with errno set.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}
}  // namespace

// ---- names ----

std::string run_path(const std::string& path, const std::string& run_id) {
  const fs::path p(path);
  return (p.parent_path() / (p.stem().string() + ".run-" + run_id + p.extension().string())).string();
}

std::string own_name(const std::string& path, const std::string& run_id) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return path;
  try {
    if (read_train_state(path).run_id == run_id) return path;  // this run's own file: replaced
  } catch (const Error&) {
    // unreadable: whose it is cannot be told, so it is not replaced either
  }
  return run_path(path, run_id);
}

std::string checkpoint_path(const std::string& dir, int64_t epoch) {
  return (fs::path(dir) / ("checkpoint_epoch" + std::to_string(epoch) + ".safetensors")).string();
}

std::string mid_epoch_checkpoint_path(const std::string& dir, int64_t epoch, int64_t step) {
  return (fs::path(dir) / ("checkpoint_epoch" + std::to_string(epoch) + "_step" + std::to_string(step) +
                           ".safetensors")).string();
}

std::string step_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("checkpoint_step" + std::to_string(step) + ".safetensors")).string();
}

std::string checkpoint_path_for(const std::string& dir, const TrainState& s, CheckpointNaming naming) {
  if (naming == CheckpointNaming::step) return step_checkpoint_path(dir, s.step);
  // Epochs in names count from 1: at a boundary s.epoch epochs are done (the last one is "epoch
  // s.epoch"); mid-epoch s.epoch is the running epoch's 0-based index, so its number is s.epoch + 1.
  const bool boundary = s.epoch_offset == 0 && s.index_in_epoch == 0;
  return boundary ? checkpoint_path(dir, s.epoch) : mid_epoch_checkpoint_path(dir, s.epoch + 1, s.step);
}

bool is_checkpoint_name(const std::string& filename) {
  static const std::regex re(R"(checkpoint_.+\.safetensors)");
  return std::regex_match(filename, re);
}

// ---- listing ----

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_checkpoint_name(name) || !e.is_regular_file(ec)) continue;
    CheckpointInfo c;
    c.path = e.path().string();
    try {
      c.state = read_train_state(c.path);
      c.readable = true;
    } catch (const Error& err) {
      c.error = err.what();
    }
    c.saved_at = c.state.saved_at.empty() ? mtime(c.path) : c.state.saved_at;
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    if (a.readable != b.readable) return a.readable;
    if (!a.readable) return a.path < b.path;
    if (a.saved_at != b.saved_at) return a.saved_at > b.saved_at;
    if (a.state.step != b.state.step) return a.state.step > b.state.step;
    return a.path > b.path;
  });
  return out;
}

std::string latest_checkpoint(const std::string& dir, const std::string& run_id) {
  for (const CheckpointInfo& c : list_checkpoints(dir))
    if (c.readable && c.state.run_id == run_id) return c.path;
  return "";
}

int prune_checkpoints(const std::string& dir, int keep, const std::string& run_id, const std::string& just_written) {
  if (keep <= 0) return 0;
  int kept = 1, removed = 0;  // just_written is one of the kept
  for (const CheckpointInfo& c : list_checkpoints(dir)) {
    if (!c.readable || c.state.run_id != run_id || same_file(c.path, just_written)) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    // An exclusive flock, not waiting: a reader's shared one (ReadHold) keeps the file for now.
    const int fd = ::open(c.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // gone already
    // (Where flock is unsupported - ENOLCK, EOPNOTSUPP - no reader can hold one either: removed.)
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
      std::error_code ec;
      if (fs::remove(c.path, ec)) ++removed;
    }
    ::close(fd);
  }
  return removed;
}

ReadHold ReadHold::take(const std::string& path) {
  ReadHold h;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return h;
  struct stat st{};
  // After the lock: a pruner that unlinked the file before we locked it has left it with no name.
  const bool locked = ::flock(fd, LOCK_SH) == 0 || errno == ENOLCK || errno == EOPNOTSUPP;  // else no hold at all
  if (!locked || ::fstat(fd, &st) != 0 || st.st_nlink == 0) {
    ::close(fd);
    return h;
  }
  h.fd_ = fd;
  return h;
}

ReadHold& ReadHold::operator=(ReadHold&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_, o.fd_ = -1;
  }
  return *this;
}

ReadHold::~ReadHold() {
  if (fd_ >= 0) ::close(fd_);
}

// ---- start-up checks ----

bool ensure_writable(const std::string& dir) {
  TANDEM_CHECK(!dir.empty(), "the checkpoint folder is empty; pass [dir <folder>]");
  std::error_code ec;
  const bool existed = fs::is_directory(dir, ec);
  if (!existed) {
    // A link whose target is gone: create_directories would say only "File exists".
    if (fs::is_symlink(dir, ec) && !fs::exists(dir, ec)) {
      const fs::path target = fs::read_symlink(dir, ec);
      TANDEM_THROW("the checkpoint folder '", dir, "' is a symbolic link to '", target.string(),
                   "', which does not exist (a dangling link): create that folder, or choose another checkpoint "
                   "folder; nothing has been trained yet.");
    }
    fs::create_directories(dir, ec);
    TANDEM_CHECK(!ec, "cannot create the checkpoint folder '", dir, "': ", ec.message(),
                 ". Choose a [dir] you can write to, or fix its parent's permissions; nothing has been "
                 "trained yet.");
  }
  // A real write, synced: permissions, read-only mounts, quotas and a full disk all show here, not
  // when the first checkpoint is due.
  const std::string probe = safetensors::temp_path((fs::path(dir) / kProbe).string());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const char* advice = ". Choose a [dir] you can write to, or fix its permissions or free space; nothing "
                       "has been trained yet.";
  TANDEM_CHECK(fd >= 0, "the checkpoint folder '", dir, "' is not writable: creating '", probe, "' failed: ",
               std::strerror(errno), advice);
  const std::string block(4096, '\0');  // one filesystem block: a completely full disk fails here
  const bool ok = write_all(fd, block.data(), block.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  TANDEM_CHECK(ok, "the checkpoint folder '", dir, "' is not writable: writing '", probe, "' failed: ",
               std::strerror(err), advice);
  return existed;
}

void reserve_space(const std::string& dir, uint64_t bytes) {
  if (bytes == 0) return;
  const std::string probe = safetensors::temp_path((fs::path(dir) / kProbe).string());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TANDEM_CHECK(fd >= 0, "the checkpoint folder '", dir, "' is not writable: creating '", probe, "' failed: ",
               std::strerror(errno), ". Choose a folder you can write to; nothing has been trained yet.");
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));  // returns the error, does not set errno
  if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {  // cannot allocate ahead here: ask for free space
    struct statvfs v{};
    err = ::fstatvfs(fd, &v) == 0 && static_cast<uint64_t>(v.f_bavail) * v.f_frsize < bytes ? ENOSPC : 0;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  TANDEM_CHECK(err == 0, "the checkpoint folder '", dir, "' has no room for one checkpoint (", bytes / 1e6,
               " MB): reserving it failed: ", std::strerror(err), ". Free space there (or raise the quota), keep fewer "
               "checkpoints, or choose another folder; nothing has been trained yet.");
}

std::vector<std::string> remove_dead_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!safetensors::is_temp_name(name)) continue;
    const std::string stem = name.substr(0, name.find(".tmp."));
    if (!is_checkpoint_name(stem) && stem != kProbe) continue;  // someone else's temporary: not ours to judge
    std::error_code rec;
    if (fs::remove(e.path(), rec)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::string fresh_start_refusal(const std::string& dir, const std::vector<CheckpointInfo>& listing) {
  if (listing.empty()) return "";
  std::set<std::string> runs;
  size_t unreadable = 0;
  for (const CheckpointInfo& c : listing) c.readable ? (void)runs.insert(c.state.run_id) : (void)++unreadable;
  std::string what = runs.empty()       ? ""
                     : runs.size() == 1 ? "another run's"
                                        : std::to_string(runs.size()) + " other runs'";
  if (unreadable > 0) what += std::string(what.empty() ? "" : " and ") + std::to_string(unreadable) + " unreadable";
  std::string s = "checkpoint folder '" + dir + "' already holds " + std::to_string(listing.size()) +
                  " checkpoint file(s), " + what + "; a fresh start would mix two runs there:\n";
  for (size_t i = 0; i < listing.size() && i < kListed; ++i) s += line_for(listing[i]) + "\n";
  if (listing.size() > kListed) s += "  and " + std::to_string(listing.size() - kListed) + " more\n";
  return s + "Continue that run with [resume auto] (or [resume <file>]); or start a new run beside those files with "
             "[overwrite] (they are kept, never pruned and never replaced, and [resume auto] then follows the new "
             "run); or choose another [dir].";
}

std::string foreign_resume_refusal(const std::string& dir, const std::vector<CheckpointInfo>& listing,
                                   const std::string& resume, const std::string& resume_run,
                                   const std::string& folder_run) {
  if (resume_run == folder_run && !folder_run.empty()) return "";  // the folder's own run continues
  std::vector<CheckpointInfo> others;
  for (const CheckpointInfo& c : listing) {
    if (c.readable && c.state.run_id == resume_run) return "";  // the resumed run already writes here
    others.push_back(c);
  }
  if (others.empty()) return "";  // an empty folder: the resumed run makes it its own
  std::string s = "checkpoint folder '" + dir + "' belongs to another run, but '" + resume + "' is a checkpoint of run " +
                  run_label(resume_run) + "; continuing it there would mix two runs and could replace their files:\n";
  for (size_t i = 0; i < others.size() && i < kListed; ++i) s += line_for(others[i]) + "\n";
  if (others.size() > kListed) s += "  and " + std::to_string(others.size() - kListed) + " more\n";
  return s + "Resume into the folder that file came from (or an empty one); or continue that run here beside those "
             "files with [overwrite] (they are kept, never pruned, and never replaced: a name they use "
             "gets this run's id added).";
}

ResumeChoice choose_resume_auto(const std::string& dir, const std::vector<CheckpointInfo>& listing,
                                const std::string& run_id, const std::string& folder_run) {
  const std::string target = !run_id.empty() ? run_id : folder_run;
  if (!target.empty()) {  // rules 1 and 2: one run's files only
    for (const CheckpointInfo& c : listing)
      if (c.readable && c.state.run_id == target) return {c.path, target};
    return {"", target};
  }
  // Rule 3: no run named anywhere. The listing is newest first, so the first file of each run is its newest.
  std::vector<const CheckpointInfo*> newest;
  for (const CheckpointInfo& c : listing) {
    if (!c.readable) continue;
    bool seen = false;
    for (const CheckpointInfo* n : newest) seen = seen || n->state.run_id == c.state.run_id;
    if (!seen) newest.push_back(&c);
  }
  if (newest.empty()) return {"", ""};
  if (newest.size() == 1) return {newest[0]->path, newest[0]->state.run_id};
  std::string runs;
  for (const CheckpointInfo* n : newest) runs += "\n" + line_for(*n);
  TANDEM_THROW("[resume auto]: checkpoint folder '", dir, "' holds checkpoints of ", newest.size(),
               " runs and no record of which one used it last (newest file of each run):", runs,
               "\nPass the file to continue with [resume <file>], or name its run ([run_id <id>]).");
}

std::string newest_intact(const std::string& dir, const std::vector<CheckpointInfo>& listing, const ResumeChoice& c,
                          std::vector<std::string>& notes) {
  std::vector<std::string> damaged;
  bool reached = false;
  for (const CheckpointInfo& f : listing) {  // newest first
    if (!f.readable || f.state.run_id != c.run_id) continue;
    reached = reached || same_file(f.path, c.path);
    if (!reached) continue;
    const std::string bad = checkpoint_damage(f.path);  // the whole file: truncation, digests
    if (bad.empty()) {
      if (!damaged.empty())
        notes.push_back("[resume auto]: skipped the damaged newest checkpoint(s) of run " + run_label(c.run_id) +
                        " - " + [&] {
                          std::string s;
                          for (const std::string& d : damaged) s += (s.empty() ? "" : "; ") + d;
                          return s;
                        }() + " - and resumes from the newest intact one, " + file_name(f.path) + " (step " +
                        std::to_string(f.state.step) + ")");
      return f.path;
    }
    damaged.push_back(file_name(f.path) + ": " + reason(bad));
  }
  std::string list;
  for (const std::string& d : damaged) list += "\n  " + d;
  throw CheckpointDamaged("[resume auto]: every checkpoint of run " + run_label(c.run_id) + " in '" + dir +
                          "' is damaged:" + list + "\nRestore a copy of one, resume another file with "
                          "[resume <file>], or start a new run.");
}

std::string resume_auto_found_nothing(const std::string& dir, bool dir_existed, const std::string& run_id,
                                      const std::vector<CheckpointInfo>& listing) {
  if (!dir_existed)
    return "[resume auto]: checkpoint folder '" + dir + "' did not exist (created it), so there is nothing to resume: "
           "starting a new run";
  size_t readable = 0;
  for (const CheckpointInfo& c : listing) readable += c.readable;
  const size_t unreadable = listing.size() - readable;
  std::string s = "[resume auto]: no checkpoint";
  if (!run_id.empty()) s += " of run " + run_id;
  s += " in '" + dir + "'";
  std::string left;
  if (readable > 0 && !run_id.empty()) left = std::to_string(readable) + " of other runs";
  if (unreadable > 0) left += (left.empty() ? "" : ", ") + std::to_string(unreadable) + " unreadable";
  if (!left.empty()) s += " (" + left + " left alone)";
  return s + ": starting a new run";
}

// ---- the folder, owned for one run ----

CheckpointDir CheckpointDir::open(const CheckpointDirOptions& o) {
  TANDEM_CHECK(o.run_id.empty() || is_valid_run_id(o.run_id), "run id '", o.run_id,
               "' may hold only letters, digits, '.', '_' and '-' (at most 64 characters)");
  CheckpointDir d;
  d.o_ = o;
  const bool existed = ensure_writable(o.dir);
  FolderLockOptions lo;
  lo.program = o.program, lo.run_id = o.run_id, lo.use_flock = o.use_flock;
  d.lock_ = FolderLock::acquire(o.dir, lo);
  d.notes_ = d.lock_.notes();
  const std::vector<std::string> removed = remove_dead_temporaries(o.dir);
  if (!removed.empty()) {
    std::string names;
    for (const std::string& n : removed) names += (names.empty() ? "" : ", ") + n;
    d.notes_.push_back("removed " + std::to_string(removed.size()) + " temporary file(s) of interrupted writes in '" +
                       o.dir + "': " + names);
  }
  const std::vector<CheckpointInfo> listing = list_checkpoints(o.dir);
  const std::string fresh_id = o.run_id.empty() ? new_run_id() : o.run_id;

  if (o.resume == "auto") {
    const std::string folder_run = d.lock_.previous() ? d.lock_.previous()->last_run : "";
    ResumeChoice c = choose_resume_auto(o.dir, listing, o.run_id, folder_run);
    if (!c.path.empty()) c.path = newest_intact(o.dir, listing, c, d.notes_);
    d.resume_path_ = c.path;
    // A file without a run id (format 1) starts a named run from here on.
    d.run_id_ = !c.path.empty() && !c.run_id.empty() ? c.run_id : fresh_id;
    if (c.path.empty()) d.notes_.push_back(resume_auto_found_nothing(o.dir, existed, c.run_id, listing));
  } else if (!o.resume.empty()) {
    const TrainState st = read_train_state(o.resume);  // a missing or foreign file fails here, before training
    TANDEM_CHECK(o.run_id.empty() || st.run_id.empty() || st.run_id == o.run_id, "'", o.resume, "' belongs to run ",
                 st.run_id, ", not to the run id given (", o.run_id, "): drop the run id or resume another file");
    const std::string folder_run = d.lock_.previous() ? d.lock_.previous()->last_run : "";
    if (!o.overwrite) {
      const std::string refusal = foreign_resume_refusal(o.dir, listing, o.resume, st.run_id, folder_run);
      if (!refusal.empty()) TANDEM_THROW(refusal);
    }
    d.resume_path_ = o.resume;
    d.run_id_ = st.run_id.empty() ? fresh_id : st.run_id;
  } else {
    if (!o.overwrite) {
      const std::string refusal = fresh_start_refusal(o.dir, listing);
      if (!refusal.empty()) TANDEM_THROW(refusal);
    }
    for (const CheckpointInfo& c : listing)
      TANDEM_CHECK(!c.readable || c.state.run_id != fresh_id, "run id ", fresh_id, " already has checkpoints in '",
                   o.dir, "' (", file_name(c.path), "); a fresh start must not reuse it: resume that run, or pick "
                   "another run id");
    d.run_id_ = fresh_id;
  }
  d.lock_.set_run_id(d.run_id_);
  return d;
}

std::string CheckpointDir::write(const Module& model, const NamedTensors& optimizer_state, TrainState s) {
  TANDEM_CHECK(lock_.held(), "CheckpointDir::write on a folder that is not open (moved from?)");
  TANDEM_CHECK(s.run_id.empty() || s.run_id == run_id_, "the state to save names run ", s.run_id, " but '", o_.dir,
               "' is open for run ", run_id_);
  s.run_id = run_id_;
  const std::string path = own_name(checkpoint_path_for(o_.dir, s, o_.naming), run_id_);
  save_checkpoint(path, model, optimizer_state, s);
  prune_checkpoints(o_.dir, o_.keep, run_id_, path);
  return path;
}

}  // namespace tandem
