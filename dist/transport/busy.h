// dist/transport/busy.h: "this rank is doing long host work, and it is advancing" - what lets the
// watchdog (watchdog.h) tell a slow rank from a hung one.
//
// The case it exists for (issue 20, defect 3): rank 0 writes a 1.1 GB checkpoint to a disk that takes
// 10 MB/s, while the other ranks wait for it in the next step's collective. Past the 45 s deadline
// their watchdog used to ask "how far did you get?", got no answer from rank 0 (it was in no
// collective) and ended a healthy job. Now a rank that enters known long work announces it:
//
//   dist::Busy busy("writing checkpoint", {.unit = "bytes"});
//   ... busy.progress(bytes_written) ...        // or dist::busy_progress(n) from deeper code
//
// Every communicator's thread answers the watchdog's question even while idle (comm_mpi.cpp,
// comm_nccl.cpp), and the answer carries this rank's innermost announcement: what, for how long,
// how far (progress) and for how long the progress has not moved (stalled_s). A waiting rank whose
// missing peers are all busy and advancing - stalled for less than the timeout - waits on instead
// of aborting, and asks again later; a peer whose progress stands still for the whole timeout is
// hung, and the watchdog names it ("busy writing checkpoint for 93 s, no progress for 46 s").
// So a slow disk never kills a healthy job, and a hang is still named within one timeout of the
// moment the work stopped advancing.
//
// Progress is any number that grows while the work advances (bytes written, batches validated);
// only its changes matter. Work that cannot be measured (a data-set scan inside a library that
// reports nothing) may set BusyOptions::unmeasured_s: it counts as advancing for that long, then
// as stalled.
//
// Scopes nest (the innermost one of a thread is the one that reports). They are per process and
// per thread: MPI and NCCL ranks (one process each) answer with the process's innermost scope;
// the thread communicator (comm_thread.h), whose ranks are threads of one process, reads the scope
// of the missing rank's thread. Thread-safe: the communicators' threads read what the training
// thread writes.
#pragma once
#include <cstdint>
#include <string>
#include <thread>

namespace tandem::dist {

struct BusyOptions {
  // Names the progress in messages: "bytes" prints as MB; anything else prints as a count with it
  // ("412 batches"). Default "": a bare count.
  std::string unit;
  // > 0: the work reports no progress, and counts as advancing for this many seconds from its start
  // (then as stalled). Default 0: the work reports progress, and stalls when it stops doing so.
  double unmeasured_s = 0;
};

class Busy {
 public:
  explicit Busy(std::string what, BusyOptions options = {});
  ~Busy();
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;
  // The work advanced to `done` (any measure that grows). Cheap: a few atomic stores.
  void progress(uint64_t done);

  struct Entry;  // the registry's record of one scope (busy.cpp)

 private:
  Entry* entry_;
};

// Reports progress to the calling thread's innermost Busy scope; a no-op when there is none (so
// low-level code may call it unconditionally: the checkpoint writer's progress hook does).
void busy_progress(uint64_t done);

// What the watchdog's answer carries about a rank's announced work.
struct BusyReport {
  bool busy = false;      // a Busy scope is open
  std::string what;       // its description ("writing checkpoint")
  std::string unit;       // BusyOptions::unit
  double busy_s = 0;      // seconds since the scope opened
  double stalled_s = 0;   // seconds since the progress last moved (or the scope opened); for
                          // unmeasured work, seconds past BusyOptions::unmeasured_s (0 before)
  uint64_t progress = 0;  // the last progress reported
};
// The process's innermost open scope (of any thread): what an MPI or NCCL rank reports.
BusyReport busy_report();
// The innermost open scope of `thread`: what the thread communicator reports for a rank.
BusyReport busy_report(std::thread::id thread);

// "writing checkpoint for 93 s, 812.4 MB so far, no progress for 46 s" (the parts that apply).
std::string describe(const BusyReport& r);

}  // namespace tandem::dist
