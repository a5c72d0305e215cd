// dist/transport/busy.cpp: the registry of open Busy scopes (see busy.h).
#include "dist/transport/busy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

namespace tandem::dist {

namespace {
using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
}  // namespace

struct Busy::Entry {
  std::string what;
  BusyOptions options;
  std::thread::id thread;
  int64_t start_ns = 0;
  std::atomic<int64_t> moved_ns{0};      // when the progress last changed (start_ns before any)
  std::atomic<uint64_t> progress{0};
};

namespace {
// Open scopes in the order they opened: the last one of a thread is its innermost. A mutex, not a
// lock-free list: scopes open a few times per epoch, and the watchdog reads them only when a
// deadline passed; progress updates touch only their entry's atomics.
std::mutex g_mutex;
std::vector<Busy::Entry*>& entries() {
  static std::vector<Busy::Entry*> e;
  return e;
}

BusyReport report_of(const Busy::Entry* e) {
  BusyReport r;
  if (!e) return r;
  const int64_t now = now_ns();
  r.busy = true;
  r.what = e->what;
  r.unit = e->options.unit;
  r.busy_s = (now - e->start_ns) * 1e-9;
  r.progress = e->progress.load();
  if (e->options.unmeasured_s > 0) r.stalled_s = std::max(0.0, r.busy_s - e->options.unmeasured_s);
  else r.stalled_s = (now - e->moved_ns.load()) * 1e-9;
  return r;
}
}  // namespace

Busy::Busy(std::string what, BusyOptions options) : entry_(new Entry) {
  entry_->what = std::move(what);
  entry_->options = std::move(options);
  entry_->thread = std::this_thread::get_id();
  entry_->start_ns = now_ns();
  entry_->moved_ns = entry_->start_ns;
  std::lock_guard<std::mutex> lock(g_mutex);
  entries().push_back(entry_);
}

Busy::~Busy() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto& e = entries();
    e.erase(std::remove(e.begin(), e.end(), entry_), e.end());
  }
  delete entry_;
}

void Busy::progress(uint64_t done) {
  // Only a change counts: a writer that reports the same byte count twice has not advanced.
  if (entry_->progress.exchange(done) != done) entry_->moved_ns = now_ns();
}

void busy_progress(uint64_t done) {
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& e = entries();
  for (auto it = e.rbegin(); it != e.rend(); ++it)
    if ((*it)->thread == me) {
      if ((*it)->progress.exchange(done) != done) (*it)->moved_ns = now_ns();
      return;
    }
}

BusyReport busy_report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return report_of(entries().empty() ? nullptr : entries().back());
}

BusyReport busy_report(std::thread::id thread) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& e = entries();
  for (auto it = e.rbegin(); it != e.rend(); ++it)
    if ((*it)->thread == thread) return report_of(*it);
  return {};
}

std::string describe(const BusyReport& r) {
  if (!r.busy) return "not in announced work";
  char b[320];
  int n = std::snprintf(b, sizeof b, "busy %s for %.0f s", r.what.c_str(), r.busy_s);
  if (r.progress > 0) {
    if (r.unit == "bytes") n += std::snprintf(b + n, sizeof b - n, ", %.1f MB so far", r.progress / 1e6);
    else n += std::snprintf(b + n, sizeof b - n, ", %llu%s%s so far", (unsigned long long)r.progress,
                            r.unit.empty() ? "" : " ", r.unit.c_str());
  }
  // Whole seconds only: a fresh report (under a second) is "advancing", not worth a number.
  if (r.stalled_s >= 1) std::snprintf(b + n, sizeof b - n, ", no progress for %.0f s", r.stalled_s);
  return b;
}

}  // namespace tandem::dist
