// tests/test_checkpoint_lock.cpp: the checkpoint folder's lock (checkpoint/checkpoint_lock.h). A child
// process holds it and a second holder is refused with a message naming the first; a holder killed
// with SIGKILL leaves a stale record that the next job takes over with a note; the record alone
// (flock off) refuses a live holder, takes over a dead or reused pid, and refuses an unverifiable
// holder on another machine.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "tests/support/error_text.h"
#include "core/check.h"
#include "checkpoint/checkpoint_lock.h"

using namespace tandem;
using namespace tandem::testing;  // app, AppRun, run_app, slurp, scratch_dir, ...

namespace {

// A child process that takes the lock (run "childrun") and holds it until killed. Returns its pid
// once it holds the lock. With `resident_mib` > 0 the child first makes that much memory resident, so
// that its exit after SIGKILL - unmapping that memory, then closing its files (and with them the
// flock) - takes milliseconds, as a trainer's does: the window in which a restart meets a holder that
// is dying but still holds flock.
pid_t child_holding(const std::string& dir, size_t resident_mib = 0) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    char ok = '0';
    try {
      std::vector<char> resident(resident_mib << 20, 1);  // touched: every page faulted in
      FolderLockOptions o;
      o.program = "child";
      o.run_id = "childrun";
      FolderLock l = FolderLock::acquire(dir, o);
      ok = resident.empty() || resident.back() == 1 ? '1' : '0';
      (void)!::write(p[1], &ok, 1);
      for (;;) ::pause();  // until SIGKILL: the lock is never released
    } catch (...) {
    }
    (void)!::write(p[1], &ok, 1);
    ::_exit(1);
  }
  ::close(p[1]);
  char ok = 0;
  REQUIRE(::read(p[0], &ok, 1) == 1);
  ::close(p[0]);
  REQUIRE(ok == '1');
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// Writes a record by hand, as a holder that never released it.
void write_record(const std::string& dir, const LockHolder& h) {
  nlohmann::json j = {{"host", h.host}, {"pid", h.pid}, {"program", "other"}, {"run_id", "r1"},
                      {"since", "2026-01-01T00:00:00.000000Z"}, {"boot_id", h.boot_id},
                      {"start_ticks", h.start_ticks}, {"last_run", "r1"}, {"released", false}};
  std::ofstream(dir + "/.lock") << j.dump();
}
}  // namespace

TEST_CASE("a second holder is refused, naming the first; a killed holder's lock is taken over with a note") {
  ckpt_test::Scratch dir("lock");
  const pid_t child = child_holding(dir.str());
  FolderLockOptions o;
  o.program = "parent";
  const std::string e = error_of([&] { FolderLock::acquire(dir.str(), o); });
  CHECK(has(e, "checkpoint folder '" + dir.str() + "' is in use by another job: pid " + std::to_string(child)));
  CHECK(has(e, "on host " + this_process().host));
  CHECK(has(e, "(child, run childrun, since 20"));
  CHECK(has(e, "another [dir]"));
  // The refused job wrote nothing: the record still names the child.
  REQUIRE(read_lock_record(dir.str()));
  CHECK(read_lock_record(dir.str())->pid == child);

  kill_and_reap(child);
  FolderLock l = FolderLock::acquire(dir.str(), o);
  CHECK(l.held());
  REQUIRE(l.notes().size() == 1);
  CHECK(has(l.notes()[0], "took over the stale lock of pid " + std::to_string(child)));
  CHECK(has(l.notes()[0], "never released it"));
  CHECK(l.previous()->last_run == "");  // the child set run_id at acquire, but never committed a run
  CHECK(read_lock_record(dir.str())->pid == ::getpid());
}

TEST_CASE("a clean release needs no note; last_run survives a job that never committed") {
  ckpt_test::Scratch dir("lock_release");
  {
    FolderLock a = FolderLock::acquire(dir.str());
    a.set_run_id("runA");
    CHECK(read_lock_record(dir.str())->last_run == "runA");
  }
  auto rec = read_lock_record(dir.str());
  REQUIRE(rec);
  CHECK(rec->released);
  CHECK(rec->run_id == "runA");
  {
    FolderLock b = FolderLock::acquire(dir.str());  // e.g. refused later by the fresh-start check
    CHECK(b.notes().empty());
    CHECK(b.previous()->last_run == "runA");
  }
  CHECK(read_lock_record(dir.str())->last_run == "runA");
  CHECK(FolderLock::acquire(dir.str()).notes().empty());
}

TEST_CASE("a live holder on this machine is refused even when flock is granted (flock that does not exclude)") {
  ckpt_test::Scratch dir("lock_live");
  write_record(dir.str(), this_process());  // alive: this very process, same start time
  for (bool use_flock : {true, false}) {
    FolderLockOptions o;
    o.use_flock = use_flock;
    const std::string e = error_of([&] { FolderLock::acquire(dir.str(), o); });
    CHECK(has(e, "is in use by another job: pid " + std::to_string(::getpid())));
    CHECK(has(e, "flock was granted") == use_flock);
  }
}

TEST_CASE("record only (flock off): a dead pid or a reused pid is stale; another machine's holder is refused") {
  ckpt_test::Scratch dir("lock_record");
  FolderLockOptions o;
  o.use_flock = false;

  SUBCASE("dead pid") {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    LockHolder h = this_process();
    h.pid = child;
    write_record(dir.str(), h);
    CHECK_FALSE(holder_alive(h));
    FolderLock l = FolderLock::acquire(dir.str(), o);
    REQUIRE(l.notes().size() == 1);
    CHECK(has(l.notes()[0], "took over the stale lock of pid " + std::to_string(child)));
  }
  SUBCASE("the pid is alive but started at another time: reused") {
    LockHolder h = this_process();
    REQUIRE(h.start_ticks >= 0);  // Linux: /proc/self/stat
    h.start_ticks += 1;
    write_record(dir.str(), h);
    CHECK_FALSE(holder_alive(h));
    CHECK(FolderLock::acquire(dir.str(), o).notes().size() == 1);
  }
  SUBCASE("another boot of this machine") {
    LockHolder h = this_process();
    REQUIRE(!h.boot_id.empty());
    h.boot_id = "00000000-0000-0000-0000-000000000000";
    CHECK_FALSE(holder_alive(h));
  }
  SUBCASE("another machine") {
    LockHolder h = this_process();
    h.host = "some-other-node";
    write_record(dir.str(), h);
    const std::string e = error_of([&] { FolderLock::acquire(dir.str(), o); });
    CHECK(has(e, "on host some-other-node"));
    CHECK(has(e, "delete '" + dir.str() + "/.lock'"));
    // With flock, the kernel (or the NFS server) says that holder is gone: taken over, with a warning.
    FolderLock l = FolderLock::acquire(dir.str());
    REQUIRE(l.notes().size() == 1);
    CHECK(has(l.notes()[0], "flock says it is gone"));
  }
}

TEST_CASE("a zombie holder (killed, not yet reaped by its parent) counts as dead: the restart is not refused") {
  // Issue 29, item 2: right after kill -9 the dead rank 0 is a zombie (state Z in /proc/<pid>/stat) until
  // its launcher reaps it - seen for 90 s. kill(pid, 0) still succeeds then, and the lock counted it alive.
  ckpt_test::Scratch dir("lock_zombie");
  const pid_t child = child_holding(dir.str());
  ::kill(child, SIGKILL);  // not reaped: the child stays a zombie until waitpid below
  auto state = [&] {
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    std::getline(in, line);
    const size_t close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
  };
  for (int i = 0; i < 500 && state() != 'Z'; ++i) ::usleep(10 * 1000);  // up to 5 s for the kill to land
  REQUIRE(state() == 'Z');
  const std::optional<LockHolder> rec = read_lock_record(dir.str());
  REQUIRE(rec);
  CHECK(rec->pid == child);
  CHECK_FALSE(holder_alive(*rec));
  for (bool use_flock : {true, false}) {
    FolderLockOptions o;
    o.use_flock = use_flock;
    FolderLock l = FolderLock::acquire(dir.str(), o);
    CHECK(l.held());
    REQUIRE(l.notes().size() >= 1);
    CHECK(has(l.notes().back(), "took over the stale lock of pid " + std::to_string(child)));
    // put the child's unreleased record back for the second pass
    l = FolderLock();
    write_record(dir.str(), *rec);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
}

TEST_CASE("a restart right after kill -9 waits for the dying holder's flock instead of refusing") {
  // fault_drill's kill-and-restart loop (issue 29, item 2) was refused once in 10 on a clean CI run:
  // rank 0, killed with SIGKILL a moment earlier, was still exiting - not yet a zombie, its files not
  // yet closed - so flock said "held" and the record named a live process. A holder with SIGKILL
  // pending is dying: the lock waits for its flock (checkpoint_lock.h, kDyingHolderWaitS).
  ckpt_test::Scratch dir("lock_dying");
  int refused = 0;
  for (int i = 0; i < 5; ++i) {
    const pid_t child = child_holding(dir.str(), 256);
    ::kill(child, SIGKILL);  // and at once, as a supervisor's restart does
    try {
      FolderLock l = FolderLock::acquire(dir.str());
      CHECK(l.held());
    } catch (const Error& e) {
      ++refused;
      INFO(e.what());
      CHECK(has(e.what(), "is in use by another job"));
    }
    int status = 0;
    ::waitpid(child, &status, 0);
  }
  CHECK(refused == 0);
}

TEST_CASE("sigkill_pending reads SIGKILL from /proc/<pid>/status's pending masks") {
  CHECK(sigkill_pending("Name:\tx\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n"));
  CHECK(sigkill_pending("SigPnd:\t0000000000000000\nShdPnd:\t0000000000004100\n"));
  CHECK_FALSE(sigkill_pending("SigPnd:\t0000000000000000\nShdPnd:\t0000000000004000\n"));  // SIGTERM only
  CHECK_FALSE(sigkill_pending(""));
}
