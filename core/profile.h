// core/profile.h: named ranges for Nsight Systems (NVTX) and Chrome traces (Perfetto).
//
// profile::Range r("forward") pushes an NVTX range (CUDA builds) and, when tracing is on, records a
// complete event ("ph":"X") with host timestamps. Nsight shows the NVTX ranges against the GPU
// kernels; the Chrome trace is the portable, per-rank view. Both use the same names, so a timeline
// reads like the code. Host timestamps on a GPU measure enqueue time, not kernel time: events that
// must show GPU time (dist/'s bucket all-reduces) are added explicitly with add_event() from CUDA
// event timings.
//
// Levels keep the trace small: Step (forward/backward/optimizer), Layer (each module), Op (every
// autograd node). Tracing records up to the chosen level; NVTX always gets every level because an
// NVTX push with no tool attached costs nanoseconds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::profile {

enum class Level : int { Step = 0, Layer = 1, Op = 2 };

struct Event {
  std::string name;
  std::string category;  // "step", "layer", "op", "comm", ...
  double start_us;       // microseconds since the process's clock origin
  double duration_us;
  int track;             // Chrome "tid": 0 = compute thread, 1 = communication, ...
};

// Microseconds since a fixed origin (steady clock), shared by all tracks of this process.
double now_us();

void enable_trace(Level max_level = Level::Layer);
void disable_trace();
bool trace_enabled();
void add_event(Event e);              // thread-safe
std::vector<Event> take_events();     // drains this process's events
// Writes a Chrome trace JSON file. Each entry of `per_rank` becomes a process ("pid") named
// "rank N"; the file loads in Perfetto and chrome://tracing.
void write_chrome_trace(const std::string& path, const std::vector<std::vector<Event>>& per_rank);

class Range {
 public:
  explicit Range(const char* name, Level level = Level::Step, int track = 0);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  std::string owned_name_;
  Level level_;
  int track_;
  double start_ = -1;
};

}  // namespace tandem::profile
