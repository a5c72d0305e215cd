// apps/train/faults.cpp: TANDEM_FAULT's parser and the step loop's fault hooks (see faults.h).
#include "apps/train/faults.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"            // defines: TANDEM_CHECK
#include "core/safetensors.h"      // defines: set_write_progress (the slow disk)
#include "core/ops/elementwise/elementwise.h"  // defines: scale (the NaN loss)
#include "checkpoint/checkpoint.h"     // defines: set_checkpoint_crash_hook

namespace tandem::apps {

namespace {

constexpr const char* kForms =
    "expected rank:step:kind[:arg] with kind kill, hang, nan, slow[:DURATION], crash-in-checkpoint or "
    "slow-checkpoint[:RATE] (e.g. TANDEM_FAULT=1:5:kill, TANDEM_FAULT=1:3:slow:200ms or "
    "TANDEM_FAULT=0:1:slow-checkpoint:100KB/s)";

int64_t parse_int(const std::string& s, const char* what, const std::string& spec) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TANDEM_CHECK(used == s.size() && !s.empty() && v >= 0, "TANDEM_FAULT='", spec, "': the ", what, " '", s,
               "' is not a non-negative integer; ", kForms);
  return v;
}

// "1.5s" -> {1.5, "s"}; value -1 when `s` does not start with a number.
std::pair<double, std::string> number_and_unit(const std::string& s) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    return {-1.0, ""};
  }
  return {v, s.substr(used)};
}

// "250ms", "1.5s" or "250" (milliseconds).
double parse_duration_ms(const std::string& s, const std::string& spec) {
  const auto [v, unit] = number_and_unit(s);
  TANDEM_CHECK(v >= 0 && (unit.empty() || unit == "ms" || unit == "s"), "TANDEM_FAULT='", spec,
               "': the slow duration '", s, "' is not a duration like 200ms, 1.5s or 200; ", kForms);
  return unit == "s" ? v * 1000 : v;
}

// "100KB/s", "2MB/s", "500B/s" or "500" (bytes per second; decimal units).
double parse_rate(const std::string& s, const std::string& spec) {
  const auto [v, unit] = number_and_unit(s);
  const double scale = unit.empty() || unit == "B/s" ? 1 : unit == "KB/s" ? 1e3 : unit == "MB/s" ? 1e6
                       : unit == "GB/s"              ? 1e9 : -1;
  TANDEM_CHECK(v >= 0 && scale > 0, "TANDEM_FAULT='", spec, "': the rate '", s,
               "' is not a rate like 100KB/s, 2MB/s, 500B/s or 500 (bytes per second); ", kForms);
  return v * scale;
}

// The slow disk: a progress hook (core/safetensors.h) in front of the one there before, which holds
// each file's reported bytes to `rate` - sleeping in 100 ms slices and passing the bytes a disk of
// that rate would have taken by then to the hook behind it, so the Busy scope of the writer
// (dist/transport/busy.h) sees a slow disk, not a frozen one. rate 0 never gets past the first byte.
safetensors::WriteProgress slow_disk(double rate, safetensors::WriteProgress next) {
  using Clock = std::chrono::steady_clock;
  auto start = std::make_shared<Clock::time_point>(Clock::now());
  return [rate, next = std::move(next), start](uint64_t done, uint64_t total) {
    if (done == 0) *start = Clock::now();  // a new file
    auto pass = [&](uint64_t n) {
      if (next) next(n, total);
    };
    for (;;) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - *start).count();
      const double allowed = rate * elapsed;
      if (allowed >= static_cast<double>(done)) break;
      pass(static_cast<uint64_t>(allowed));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    pass(done);
  };
}

// 128 + SIGKILL: what a shell reports for a killed process (see faults.h for why not a signal).
constexpr int kKilledStatus = 137;

void crash_now(const std::string& partial) {
  std::fprintf(stderr, "[rank 0] TANDEM_FAULT: dying halfway through writing a checkpoint (%s left half-written)\n",
               partial.c_str());
  std::fflush(stderr);
  std::_Exit(kKilledStatus);
}

}  // namespace

Fault parse_fault(const std::string& spec) {
  std::vector<std::string> part;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) part.push_back(p);
  TANDEM_CHECK(part.size() == 3 || part.size() == 4, "TANDEM_FAULT='", spec, "' has ", part.size(), " fields; ",
               kForms);
  Fault f;
  f.rank = static_cast<int>(parse_int(part[0], "rank", spec));
  f.step = parse_int(part[1], "step", spec);
  TANDEM_CHECK(f.step >= 1, "TANDEM_FAULT='", spec, "': steps count from 1 (the first step is step 1)");
  const std::string& k = part[2];
  if (k == "kill") f.kind = FaultKind::Kill;
  else if (k == "hang") f.kind = FaultKind::Hang;
  else if (k == "nan") f.kind = FaultKind::Nan;
  else if (k == "slow") f.kind = FaultKind::Slow;
  else if (k == "crash-in-checkpoint") f.kind = FaultKind::CrashInCheckpoint;
  else if (k == "slow-checkpoint") f.kind = FaultKind::SlowCheckpoint;
  else TANDEM_THROW("TANDEM_FAULT='", spec, "': unknown kind '", k, "'; ", kForms);
  TANDEM_CHECK(part.size() == 3 || f.kind == FaultKind::Slow || f.kind == FaultKind::SlowCheckpoint, "TANDEM_FAULT='",
               spec, "': only slow and slow-checkpoint take an argument; ", kForms);
  if (part.size() == 4 && f.kind == FaultKind::Slow) f.slow_ms = parse_duration_ms(part[3], spec);
  if (part.size() == 4 && f.kind == FaultKind::SlowCheckpoint) f.bytes_per_s = parse_rate(part[3], spec);
  TANDEM_CHECK((f.kind != FaultKind::CrashInCheckpoint && f.kind != FaultKind::SlowCheckpoint) || f.rank == 0,
               "TANDEM_FAULT='", spec, "': ", k, " needs rank 0, the only rank that writes checkpoints");
  return f;
}

std::optional<Fault> fault_from_env(int world_size) {
  const char* v = std::getenv("TANDEM_FAULT");
  if (!v || !*v) return std::nullopt;
  Fault f = parse_fault(v);
  TANDEM_CHECK(f.rank < world_size, "TANDEM_FAULT='", v, "' names rank ", f.rank, " but the job has ", world_size,
               " rank(s)");
  return f;
}

void fault_before_step(const std::optional<Fault>& f, int rank, int64_t step) {
  if (!f || f->rank != rank || step != f->step) return;
  switch (f->kind) {
    case FaultKind::Kill:
      std::fprintf(stderr, "[rank %d] TANDEM_FAULT: killing this rank at step %lld\n", rank, (long long)step);
      std::fflush(stderr);
      std::_Exit(kKilledStatus);
    case FaultKind::Hang:
      std::fprintf(stderr, "[rank %d] TANDEM_FAULT: hanging at step %lld (no more collectives)\n", rank,
                   (long long)step);
      std::fflush(stderr);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(3600));
    case FaultKind::CrashInCheckpoint:
      std::fprintf(stderr, "[rank %d] TANDEM_FAULT: the next checkpoint (from step %lld on) will crash midway\n",
                   rank, (long long)step);
      set_checkpoint_crash_hook(&crash_now);
      break;
    case FaultKind::SlowCheckpoint:
      if (f->bytes_per_s > 0)
        std::fprintf(stderr, "[rank %d] TANDEM_FAULT: checkpoints from step %lld on go to a disk writing %.0f bytes/s\n",
                     rank, (long long)step, f->bytes_per_s);
      else
        std::fprintf(stderr, "[rank %d] TANDEM_FAULT: the disk stops: the next checkpoint write (from step %lld on) "
                     "hangs\n", rank, (long long)step);
      safetensors::set_write_progress(slow_disk(f->bytes_per_s, safetensors::set_write_progress(nullptr)));
      break;
    default:
      break;
  }
}

Tensor fault_in_step(const std::optional<Fault>& f, int rank, int64_t step, const Tensor& loss) {
  if (!f || f->rank != rank) return loss;
  if (f->kind == FaultKind::Slow && step >= f->step) {
    if (step == f->step)
      std::fprintf(stderr, "[rank %d] TANDEM_FAULT: sleeping %.0f ms per step from step %lld on\n", rank, f->slow_ms,
                   (long long)step);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(f->slow_ms));
  }
  if (f->kind != FaultKind::Nan || f->step != step) return loss;
  std::fprintf(stderr, "[rank %d] TANDEM_FAULT: making the loss NaN at step %lld\n", rank, (long long)step);
  return ops::scale(loss, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace tandem::apps
